//! Tool search: recall on a labelled set, and speed at 5 000 tools.
//!
//! Quality: `eval/tools.json` (about 200 tools modelled on public MCP servers' tool lists) and
//! `eval/queries.json` (tasks written for them, each labelled with the tools that do it):
//! recall@5 and MRR@10 for [`ToolIndex::search`], and for the `bm25` crate over each tool's name,
//! description and parameters as one text (the floor).
//!
//! Speed: the labelled tools copied to 5 000 (each copy under its own server name), indexed and
//! searched with the labelled queries: build time, query p50 and p95.
//!
//! Run with `cargo bench -p tool-search --bench search`.

use std::time::Instant;

use serde_json::Value;
use tool_search::{ToolDoc, ToolIndex, words};

fn main() {
    let tools: Vec<Value> = serde_json::from_str(include_str!("../eval/tools.json")).expect("the tools");
    let labelled: Value = serde_json::from_str(include_str!("../eval/queries.json")).expect("the queries");
    let queries: Vec<(String, Vec<String>)> = labelled["queries"]
        .as_array()
        .expect("queries")
        .iter()
        .map(|q| {
            let relevant = q["relevant"].as_array().expect("relevant").iter();
            (
                q["query"].as_str().expect("a query").to_owned(),
                relevant.map(|r| r.as_str().unwrap().to_owned()).collect(),
            )
        })
        .collect();
    let docs: Vec<ToolDoc> = tools.iter().filter_map(ToolDoc::from_mcp).collect();
    println!("quality: {} tools, {} queries", docs.len(), queries.len());

    let index = ToolIndex::build(docs.clone());
    let ours: Vec<Option<usize>> = queries
        .iter()
        .map(|(query, relevant)| {
            let ranked: Vec<String> =
                index.search(query, 10).into_iter().map(|(doc, _)| index.doc(doc).id()).collect();
            rank(&ranked, relevant)
        })
        .collect();

    let corpus: Vec<String> = docs
        .iter()
        .map(|doc| {
            let parameters: Vec<String> = doc.parameters.iter().map(|(n, d)| format!("{n} {d}")).collect();
            format!(
                "{} {} {} {}",
                words(&doc.name).join(" "),
                doc.server,
                doc.description,
                parameters.join(" ")
            )
        })
        .collect();
    let engine = bm25::SearchEngineBuilder::<u32>::with_corpus(bm25::Language::English, corpus).build();
    let floor: Vec<Option<usize>> = queries
        .iter()
        .map(|(query, relevant)| {
            let ranked: Vec<String> =
                engine.search(query, 10).into_iter().map(|hit| docs[hit.document.id as usize].id()).collect();
            rank(&ranked, relevant)
        })
        .collect();
    let (recall, mrr) = score(&ours);
    println!("quality: recall@5 {recall:.3}  MRR@10 {mrr:.3}   (tool-search)");
    let (recall, mrr) = score(&floor);
    println!("quality: recall@5 {recall:.3}  MRR@10 {mrr:.3}   (floor: bm25 crate, one text per tool)");
    if std::env::var_os("TOOL_SEARCH_MISSES").is_some() {
        for ((query, relevant), (ours, floor)) in queries.iter().zip(ours.iter().zip(&floor)) {
            if ours.is_none_or(|r| r > 5) || floor.unwrap_or(99) < ours.unwrap_or(99) {
                println!("  ours {ours:?} floor {floor:?}: {query} → {relevant:?}");
            }
        }
    }

    // Speed: 5 000 tools.
    let mut many = Vec::new();
    let mut copy = 0;
    while many.len() < 5_000 {
        for doc in &docs {
            if many.len() == 5_000 {
                break;
            }
            let mut doc = doc.clone();
            doc.server = format!("{}-{copy}", doc.server);
            many.push(doc);
        }
        copy += 1;
    }
    let started = Instant::now();
    let index = ToolIndex::build(many);
    let build = started.elapsed();
    let mut times = Vec::new();
    for round in 0..20 {
        for (query, _) in &queries {
            let started = Instant::now();
            let found = index.search(query, 10);
            let elapsed = started.elapsed().as_secs_f64() * 1000.0;
            assert!(found.len() <= 10);
            if round > 0 {
                times.push(elapsed);
            }
        }
    }
    times.sort_by(f64::total_cmp);
    println!(
        "speed: {} tools indexed in {:.1} ms; a query: p50 {:.3} ms, p95 {:.3} ms ({} queries)",
        index.len(),
        build.as_secs_f64() * 1000.0,
        times[times.len() / 2],
        times[times.len() * 95 / 100],
        times.len()
    );
}

fn rank(ranked: &[String], relevant: &[String]) -> Option<usize> {
    ranked.iter().position(|id| relevant.contains(id)).map(|i| i + 1)
}

fn score(ranks: &[Option<usize>]) -> (f64, f64) {
    let n = ranks.len() as f64;
    let recall = ranks.iter().filter(|r| r.is_some_and(|r| r <= 5)).count() as f64 / n;
    let mrr = ranks.iter().map(|r| r.map_or(0.0, |r| 1.0 / r as f64)).sum::<f64>() / n;
    (recall, mrr)
}
