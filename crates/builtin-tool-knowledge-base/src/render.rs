//! Render hooks: a search as the list of passages found with their sources, a read as the lines
//! read, the bases as a table.

use serde_json::Value;
use tool_core::render::status_badge;
use tool_core::{Block, Card, RenderHooks, ToolOutput};

/// Shows knowledge-base calls.
#[derive(Debug, Clone, Copy, Default)]
pub struct KnowledgeBaseRender;

/// The render hooks, as the registry's table holds them.
pub static RENDER: KnowledgeBaseRender = KnowledgeBaseRender;

fn title(api: &str) -> &'static str {
    match api {
        "searchKnowledgeBase" => "Search the knowledge base",
        "readKnowledgeBase" => "Read from the knowledge base",
        "listKnowledgeBases" => "Knowledge bases",
        _ => "Knowledge base",
    }
}

fn text(value: &Value, key: &str) -> String {
    match value.get(key) {
        Some(Value::String(text)) => text.clone(),
        Some(Value::Number(number)) => number.to_string(),
        _ => String::new(),
    }
}

impl RenderHooks for KnowledgeBaseRender {
    fn inspector(&self, api: &str, partial: &Value) -> Card {
        self.placeholder(api, partial)
    }

    fn placeholder(&self, api: &str, arguments: &Value) -> Card {
        let card = Card::new(title(api));
        match api {
            "searchKnowledgeBase" => {
                card.fields([("Query", text(arguments, "query")), ("Base", text(arguments, "base"))])
            }
            "readKnowledgeBase" => {
                card.fields([("Source", text(arguments, "source")), ("Lines", text(arguments, "range"))])
            }
            _ => card,
        }
    }

    fn result(&self, api: &str, arguments: &Value, output: &ToolOutput) -> Card {
        let mut card = self.placeholder(api, arguments);
        card.badge = Some(status_badge(output));
        let state = output.state.clone().unwrap_or(Value::Null);
        if !output.success {
            return card.block(Block::Markdown { text: output.content.clone() });
        }
        if let Some(hits) = state.get("hits").and_then(Value::as_array) {
            let items = hits
                .iter()
                .map(|hit| {
                    let heading = text(hit, "heading");
                    let place = if heading.is_empty() { String::new() } else { format!(" · {heading}") };
                    format!("{}:{}{place}", text(hit, "source"), text(hit, "lines"))
                })
                .collect();
            return card.block(Block::List { items, ordered: true });
        }
        if let Some(bases) = state.get("bases").and_then(Value::as_array) {
            let rows = bases
                .iter()
                .map(|base| {
                    let shared =
                        if base.get("shared").and_then(Value::as_bool) == Some(true) { "yes" } else { "" };
                    vec![text(base, "name"), text(base, "sources"), text(base, "chunks"), shared.to_owned()]
                })
                .collect();
            let headers = ["Name", "Sources", "Passages", "Shared"].map(String::from).to_vec();
            return card.block(Block::Table { headers, rows });
        }
        card.block(Block::Code { language: None, text: output.content.clone() })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_search_lists_its_sources_and_lines() {
        let found = ToolOutput::ok("…").with_state(json!({"hits": [
            {"source": "/docs/install.md", "lines": "3-9", "heading": "Guide > Install"}
        ]}));
        let card = KnowledgeBaseRender.result("searchKnowledgeBase", &json!({"query": "install"}), &found);
        assert_eq!(card.title, "Search the knowledge base");
        assert!(card.blocks.contains(&Block::List {
            items: vec!["/docs/install.md:3-9 · Guide > Install".into()],
            ordered: true
        }));
    }
}
