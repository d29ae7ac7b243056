//! Render hooks: a memory as a card people can read (and see what the model kept about them).

use serde_json::Value;
use tool_core::render::status_badge;
use tool_core::{Block, Card, RenderHooks, ToolOutput};

/// Shows memory calls.
#[derive(Debug, Clone, Copy, Default)]
pub struct MemoryRender;

/// The render hooks, as the registry's table holds them.
pub static RENDER: MemoryRender = MemoryRender;

fn title(api: &str) -> &'static str {
    match api {
        "addMemory" => "Remember",
        "searchMemory" => "Search memories",
        "updateMemory" => "Update a memory",
        "removeMemory" => "Forget a memory",
        _ => "Memory",
    }
}

fn text(value: &Value, key: &str) -> String {
    value.get(key).and_then(Value::as_str).unwrap_or_default().to_owned()
}

impl RenderHooks for MemoryRender {
    fn inspector(&self, api: &str, partial: &Value) -> Card {
        self.placeholder(api, partial)
    }

    fn placeholder(&self, api: &str, arguments: &Value) -> Card {
        let card = Card::new(title(api));
        match api {
            "addMemory" | "updateMemory" => card.fields([
                ("Category", text(arguments, "category")),
                ("Title", text(arguments, "title")),
                ("Content", text(arguments, "content")),
                ("Id", text(arguments, "id")),
            ]),
            "searchMemory" => {
                card.fields([("Query", text(arguments, "query")), ("Category", text(arguments, "category"))])
            }
            _ => card.fields([("Id", text(arguments, "id"))]),
        }
    }

    fn result(&self, api: &str, arguments: &Value, output: &ToolOutput) -> Card {
        let mut card = Card::new(title(api));
        card.badge = Some(status_badge(output));
        let state = output.state.clone().unwrap_or(Value::Null);
        if !output.success {
            return self.placeholder(api, arguments).block(Block::Markdown { text: output.content.clone() });
        }
        if let Some(memories) = state.get("memories").and_then(Value::as_array) {
            let rows = memories
                .iter()
                .map(|m| vec![text(m, "category"), text(m, "title"), text(m, "content"), text(m, "id")])
                .collect();
            let headers = ["Category", "Title", "Content", "Id"].map(String::from).to_vec();
            return card.block(Block::Table { headers, rows });
        }
        let memory = state.get("memory").cloned().unwrap_or(Value::Null);
        card.fields([
            ("Category", text(&memory, "category")),
            ("Title", text(&memory, "title")),
            ("Content", text(&memory, "content")),
            ("Id", text(&memory, "id")),
        ])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_search_is_a_table_and_an_add_its_fields() {
        let found = ToolOutput::ok("…").with_state(json!({"memories": [
            {"id": "rec_1", "category": "preferences", "title": "Tabs", "content": "Prefers tabs"}
        ]}));
        let card = MemoryRender.result("searchMemory", &json!({"query": "tabs"}), &found);
        assert_eq!(
            card.blocks,
            vec![Block::Table {
                headers: vec!["Category".into(), "Title".into(), "Content".into(), "Id".into()],
                rows: vec![vec!["preferences".into(), "Tabs".into(), "Prefers tabs".into(), "rec_1".into()]],
            }]
        );
        let added = ToolOutput::ok("…").with_state(
            json!({"memory": {"id": "rec_2", "category": "identity", "title": "Name", "content": "Ada"}}),
        );
        let card = MemoryRender.result("addMemory", &json!({}), &added);
        assert_eq!(card.title, "Remember");
        assert!(
            matches!(&card.blocks[0], Block::Fields { fields } if fields.iter().any(|f| f.value == "Ada"))
        );
    }
}
