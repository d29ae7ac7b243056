//! Ranks tools for queries: `cargo run --release -p tool-search --example rank-tools -- TOOLS.json`
//! reads a JSON array of `{server, name, description, inputSchema}` from the file and one query
//! per line from standard input, and prints one line per query: the top 10 `server/name`,
//! separated by tabs (an empty line for a query nothing matches).

use std::io::{BufRead, Write};

use tool_search::{ToolDoc, ToolIndex};

fn main() {
    let Some(path) = std::env::args().nth(1) else {
        eprintln!("usage: rank-tools TOOLS.json < queries.txt");
        std::process::exit(2);
    };
    let text = std::fs::read_to_string(&path).unwrap_or_else(|error| {
        eprintln!("reading {path}: {error}");
        std::process::exit(2);
    });
    let tools: Vec<serde_json::Value> = serde_json::from_str(&text).unwrap_or_else(|error| {
        eprintln!("{path} is not a JSON array of tools: {error}");
        std::process::exit(2);
    });
    let docs: Vec<ToolDoc> = tools.iter().filter_map(ToolDoc::from_mcp).collect();
    let index = ToolIndex::build(docs);
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    for line in std::io::stdin().lock().lines() {
        let Ok(query) = line else { break };
        let ranked: Vec<String> =
            index.search(&query, 10).into_iter().map(|(doc, _)| index.doc(doc).id()).collect();
        if writeln!(out, "{}", ranked.join("\t")).is_err() {
            break;
        }
    }
}
