//! Render hooks: a document as a card with its text (Markdown shown formatted), an edit as its
//! diff, a listing as a table.

use serde_json::Value;
use tool_core::render::status_badge;
use tool_core::{Block, Card, RenderHooks, ToolOutput};

/// Shows documents calls.
#[derive(Debug, Clone, Copy, Default)]
pub struct DocumentsRender;

/// The render hooks, as the registry's table holds them.
pub static RENDER: DocumentsRender = DocumentsRender;

fn text(value: &Value, key: &str) -> String {
    value.get(key).and_then(Value::as_str).unwrap_or_default().to_owned()
}

impl RenderHooks for DocumentsRender {
    fn inspector(&self, api: &str, partial: &Value) -> Card {
        self.placeholder(api, partial)
    }

    fn placeholder(&self, api: &str, arguments: &Value) -> Card {
        let name = text(arguments, "name");
        match api {
            "createDocument" => Card::new(format!("Document · {name}"))
                .block(Block::Markdown { text: text(arguments, "content") }),
            "readDocument" => {
                Card::new(format!("Read document · {name}")).fields([("Lines", text(arguments, "lines"))])
            }
            "editDocument" => Card::new(format!("Edit document · {name}")),
            _ => Card::new("Documents"),
        }
    }

    fn result(&self, api: &str, arguments: &Value, output: &ToolOutput) -> Card {
        let mut card = self.placeholder(api, arguments);
        card.badge = Some(status_badge(output));
        let state = output.state.clone().unwrap_or(Value::Null);
        if !output.success {
            return card.block(Block::Markdown { text: output.content.clone() });
        }
        match api {
            "readDocument" => card.block(Block::Markdown { text: text(&state, "content") }),
            "editDocument" => card.block(Block::Diff { unified: text(&state, "diff") }),
            "listDocuments" => {
                let rows = state
                    .get("documents")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .map(|d| {
                        let number = |key: &str| d.get(key).and_then(Value::as_u64).unwrap_or(0).to_string();
                        vec![text(d, "name"), text(d, "scope"), number("lines"), number("bytes")]
                    })
                    .collect();
                card.block(Block::Table {
                    headers: ["Name", "Scope", "Lines", "Bytes"].map(String::from).to_vec(),
                    rows,
                })
            }
            _ => card,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_document_is_a_card_with_its_text_and_an_edit_its_diff() {
        let args = json!({"name": "plan.md", "content": "# Plan\n- one"});
        let card = DocumentsRender.result("createDocument", &args, &ToolOutput::ok("Created"));
        assert_eq!(card.title, "Document · plan.md");
        assert_eq!(card.blocks, vec![Block::Markdown { text: "# Plan\n- one".into() }]);
        let edited = ToolOutput::ok("Edited").with_state(json!({"diff": "@@ -1 +1 @@\n-a\n+b"}));
        let card = DocumentsRender.result("editDocument", &json!({"name": "plan.md"}), &edited);
        assert_eq!(card.blocks, vec![Block::Diff { unified: "@@ -1 +1 @@\n-a\n+b".into() }]);
    }
}
