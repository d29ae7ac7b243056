//! Knowledge bases: retrieval quality and speed, on the journal's embedded SQLite.
//!
//! Quality: the Cargo book as the rust-docs component installs it
//! (`<sysroot>/share/doc/rust/html/cargo`, without `print.html` and `toc.html`, which repeat every
//! page) against the labelled questions in `eval/cargo-book.json`: recall@5 and MRR@10 over
//! distinct sources, for the tool's search and for a plain BM25 library (`bm25`, its English
//! tokenizer with stemming and stop words) over the same chunks as the floor.
//!
//! Speed: 10 000 generated Markdown files of about 5 KB (50 MB): the first add, a query's p50
//! and p95, and a re-add with nothing changed. `KB_BENCH_FILES` changes the count;
//! `KB_BENCH_ONLY=quality` or `speed` runs one half; `KB_BENCH_MISSES=1` lists the questions
//! whose answer is not in the top five.
//!
//! Run with `cargo bench -p builtin-tool-knowledge-base --bench knowledge`.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use builtin_tool_knowledge_base::ingest::{AddLimits, add_base};
use serde_json::{Value, json};
use tool_core::knowledge::{KnowledgeStore, NewBase};
use tool_core::{CallContext, ToolRuntime};

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("a runtime");
    runtime.block_on(async {
        let only = std::env::var("KB_BENCH_ONLY").unwrap_or_default();
        if only != "speed" {
            quality().await;
        }
        if only != "quality" {
            speed().await;
        }
    });
}

async fn open(dir: &Path) -> Arc<dyn KnowledgeStore> {
    journal::open_stores(&format!("sqlite://{}", dir.join("kb.db").display()))
        .await
        .expect("a journal")
        .knowledge
}

fn base(name: &str, roots: Vec<String>) -> NewBase {
    NewBase {
        tenant: "local".into(),
        person: Some("local".into()),
        name: name.into(),
        roots,
        embedding_model: None,
    }
}

/// The rank (from 1) of the first relevant source among `sources` (distinct, best first).
fn rank_of(sources: &[String], relevant: &[String]) -> Option<usize> {
    sources.iter().position(|source| relevant.iter().any(|r| source == r)).map(|i| i + 1)
}

fn distinct(sources: impl IntoIterator<Item = String>) -> Vec<String> {
    let mut seen = std::collections::HashSet::new();
    sources.into_iter().filter(|s| seen.insert(s.clone())).collect()
}

struct Score {
    recall5: f64,
    mrr: f64,
}

fn score(ranks: &[Option<usize>]) -> Score {
    let n = ranks.len() as f64;
    Score {
        recall5: ranks.iter().filter(|r| r.is_some_and(|r| r <= 5)).count() as f64 / n,
        mrr: ranks.iter().map(|r| r.filter(|r| *r <= 10).map_or(0.0, |r| 1.0 / r as f64)).sum::<f64>() / n,
    }
}

async fn quality() {
    let sysroot = std::process::Command::new("rustc").args(["--print", "sysroot"]).output().expect("rustc");
    let corpus =
        PathBuf::from(String::from_utf8_lossy(&sysroot.stdout).trim()).join("share/doc/rust/html/cargo");
    if !corpus.is_dir() {
        println!("quality: skipped, {} is missing (rustup component add rust-docs)", corpus.display());
        return;
    }
    let labelled: Value =
        serde_json::from_str(include_str!("../eval/cargo-book.json")).expect("the labelled set");
    let questions = labelled["questions"].as_array().expect("questions");
    let mut pages = Vec::new();
    collect_html(&corpus, &mut pages);
    pages
        .retain(|page| !matches!(page.file_name().and_then(|n| n.to_str()), Some("print.html" | "toc.html")));
    let dir = tempfile::tempdir().expect("a temp dir");
    let store = open(dir.path()).await;
    let roots = pages.iter().map(|p| p.to_string_lossy().into_owned()).collect();
    let report = add_base(store.as_ref(), base("cargo", roots), None, AddLimits::default(), None)
        .await
        .expect("added");
    println!(
        "quality corpus: the Cargo book, {} pages, {} chunks, {} questions",
        report.base.sources,
        report.base.chunks,
        questions.len()
    );
    let relative =
        |path: &str| path.strip_prefix(&format!("{}/", corpus.display())).unwrap_or(path).to_owned();

    // The tool's search, as the model calls it.
    let tool = builtin_tool_knowledge_base::KnowledgeBaseRuntime::new(store.clone());
    let context = CallContext::new("bench", "bench");
    let mut ranks = Vec::new();
    let mut misses = Vec::new();
    for question in questions {
        let (text, relevant) = labelled_question(question);
        let output = tool.execute("searchKnowledgeBase", json!({"query": text, "limit": 20}), &context).await;
        let hits = output.state.as_ref().and_then(|s| s["hits"].as_array().cloned()).unwrap_or_default();
        let sources = distinct(hits.iter().map(|h| relative(h["source"].as_str().unwrap_or(""))));
        let rank = rank_of(&sources, &relevant);
        if rank.is_none_or(|r| r > 5) {
            misses.push(format!(
                "  {rank:?} {text} → want {relevant:?}, got {:?}",
                &sources[..sources.len().min(3)]
            ));
        }
        ranks.push(rank);
    }
    let ours = score(&ranks);

    // The floor: a plain BM25 library over the same chunks (heading trail and text).
    let mut documents = Vec::new();
    let mut owners = Vec::new();
    for page in &pages {
        let path = page.to_string_lossy().into_owned();
        for chunk in store.read_chunks("local", &report.base.id, &path, 1, u32::MAX).await.expect("chunks") {
            documents.push(format!("{}\n{}", chunk.heading, chunk.text));
            owners.push(relative(&path));
        }
    }
    let engine = bm25::SearchEngineBuilder::<u32>::with_corpus(bm25::Language::English, documents).build();
    let mut floor_ranks = Vec::new();
    for question in questions {
        let (text, relevant) = labelled_question(question);
        let found = engine.search(text, 40);
        let sources = distinct(found.iter().map(|hit| owners[hit.document.id as usize].clone()));
        floor_ranks.push(rank_of(&sources, &relevant));
    }
    let floor = score(&floor_ranks);
    println!("quality: recall@5 {:.3}  MRR@10 {:.3}   (knowledge-base search)", ours.recall5, ours.mrr);
    println!(
        "quality: recall@5 {:.3}  MRR@10 {:.3}   (floor: bm25 crate over the same chunks)",
        floor.recall5, floor.mrr
    );
    if std::env::var_os("KB_BENCH_MISSES").is_some() {
        println!("misses (rank, question, wanted, top sources):\n{}", misses.join("\n"));
        for ((question, ours), floor) in questions.iter().zip(&ranks).zip(&floor_ranks) {
            if floor.unwrap_or(99) < ours.unwrap_or(99) {
                println!("  floor {floor:?} < ours {ours:?}: {}", question["question"]);
            }
        }
    }
}

/// A labelled question and its relevant pages.
fn labelled_question(question: &Value) -> (&str, Vec<String>) {
    let text = question["question"].as_str().expect("a question");
    let relevant = question["relevant"].as_array().expect("relevant").iter();
    (text, relevant.map(|r| r.as_str().expect("a page").to_owned()).collect())
}

fn collect_html(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    let mut entries: Vec<_> = entries.flatten().map(|e| e.path()).collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            collect_html(&path, out);
        } else if path.extension().is_some_and(|e| e == "html") {
            out.push(path);
        }
    }
}

/// A deterministic generator (xorshift).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// A vocabulary of pronounceable words; lower indices are drawn more often (Zipf-like).
fn vocabulary() -> Vec<String> {
    const SYLLABLES: [&str; 24] = [
        "ka", "ro", "mi", "te", "lu", "sa", "no", "vi", "da", "pe", "zo", "ri", "gu", "fa", "ne", "to",
        "bri", "cla", "ste", "mor", "lin", "gar", "pol", "ven",
    ];
    let mut rng = Rng(7);
    (0..20_000)
        .map(|_| (0..2 + rng.below(3)).map(|_| SYLLABLES[rng.below(SYLLABLES.len())]).collect::<String>())
        .collect()
}

fn word<'a>(rng: &mut Rng, words: &'a [String]) -> &'a str {
    // Squaring a uniform draw favours the low ranks.
    let u = rng.below(1_000_000) as f64 / 1_000_000.0;
    &words[((u * u * u) * words.len() as f64) as usize]
}

fn write_corpus(dir: &Path, files: usize, words: &[String]) -> u64 {
    let mut rng = Rng(42);
    let mut total = 0;
    for i in 0..files {
        let folder = dir.join(format!("section-{:03}", i / 100));
        std::fs::create_dir_all(&folder).expect("a folder");
        let mut text = format!("# {} {}\n\n", word(&mut rng, words), word(&mut rng, words));
        while text.len() < 5_000 {
            match rng.below(6) {
                0 => text.push_str(&format!("## {} {}\n\n", word(&mut rng, words), word(&mut rng, words))),
                1 => {
                    text.push_str("```sh\n");
                    for _ in 0..3 {
                        text.push_str(&format!(
                            "run --{} {}\n",
                            word(&mut rng, words),
                            word(&mut rng, words)
                        ));
                    }
                    text.push_str("```\n\n");
                }
                _ => {
                    let sentence: Vec<&str> = (0..40).map(|_| word(&mut rng, words)).collect();
                    text.push_str(&sentence.join(" "));
                    text.push_str(".\n\n");
                }
            }
        }
        total += text.len() as u64;
        std::fs::write(folder.join(format!("page-{i:05}.md")), text).expect("a page");
    }
    total
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

async fn speed() {
    let files: usize = std::env::var("KB_BENCH_FILES").ok().and_then(|n| n.parse().ok()).unwrap_or(10_000);
    let dir = tempfile::tempdir().expect("a temp dir");
    if std::env::var_os("KB_BENCH_KEEP").is_some() {
        println!("speed: kept in {}", dir.path().display());
    }
    let corpus = dir.path().join("corpus");
    let words = vocabulary();
    let bytes = write_corpus(&corpus, files, &words);
    let store = open(dir.path()).await;
    let roots = vec![corpus.to_string_lossy().into_owned()];

    let started = Instant::now();
    let report = add_base(store.as_ref(), base("speed", roots.clone()), None, AddLimits::default(), None)
        .await
        .expect("added");
    let first = started.elapsed();
    println!(
        "speed: add {} files ({:.1} MB, {} chunks): {:.1} s",
        report.base.sources,
        bytes as f64 / 1e6,
        report.base.chunks,
        first.as_secs_f64()
    );

    let chunks = store.base_chunks("local", &report.base.id).await.expect("chunks");
    let index = builtin_tool_knowledge_base::index::Index::build(chunks.iter().map(|stored| {
        builtin_tool_knowledge_base::index::Entry {
            id: stored.id,
            path: &stored.path,
            heading: &stored.chunk.heading,
            text: &stored.chunk.text,
            embedding: None,
        }
    }));
    println!(
        "speed: the index of {} chunks holds about {:.0} MB",
        index.len(),
        index.memory_bytes() as f64 / 1e6
    );
    drop((index, chunks));

    let tool = builtin_tool_knowledge_base::KnowledgeBaseRuntime::new(store.clone());
    let context = CallContext::new("bench", "bench");
    let mut rng = Rng(99);
    let mut times = Vec::new();
    for i in 0..300 {
        let query: Vec<&str> = (0..3 + rng.below(4)).map(|_| word(&mut rng, &words)).collect();
        let started = Instant::now();
        let output = tool.execute("searchKnowledgeBase", json!({"query": query.join(" ")}), &context).await;
        let elapsed = started.elapsed().as_secs_f64() * 1000.0;
        assert!(output.success, "{}", output.content);
        if i == 0 {
            println!("speed: first search (reads the base and builds its index): {:.0} ms", elapsed);
        } else if i >= 20 {
            times.push(elapsed);
        }
    }
    times.sort_by(f64::total_cmp);
    println!(
        "speed: searchKnowledgeBase over {} chunks: p50 {:.2} ms, p95 {:.2} ms ({} queries of 3-6 words)",
        report.base.chunks,
        percentile(&times, 0.5),
        percentile(&times, 0.95),
        times.len()
    );

    let started = Instant::now();
    let again = add_base(store.as_ref(), base("speed", roots), None, AddLimits::default(), None)
        .await
        .expect("re-added");
    println!(
        "speed: re-add with nothing changed: {:.2} s ({} unchanged, {} changed)",
        started.elapsed().as_secs_f64(),
        again.unchanged,
        again.changed + again.added
    );
    if std::env::var_os("KB_BENCH_KEEP").is_some() {
        let _ = dir.keep();
    }
}
