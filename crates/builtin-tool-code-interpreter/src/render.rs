//! Render hooks: the code, what it printed, its value or error, and the files it wrote (images
//! as images where a front end can show them).

use serde_json::Value;
use tool_core::render::status_badge;
use tool_core::{Block, Card, RenderHooks, ToolOutput};

/// Shows runs as cards.
#[derive(Debug, Clone, Copy, Default)]
pub struct CodeRender;

/// The render hooks, as the registry's table holds them.
pub static RENDER: CodeRender = CodeRender;

fn code_block(arguments: &Value) -> Option<Block> {
    let code = arguments.get("code").and_then(Value::as_str)?;
    let language = arguments.get("language").and_then(Value::as_str).unwrap_or("python");
    Some(Block::Code { language: Some(language.to_owned()), text: code.to_owned() })
}

fn title(arguments: &Value) -> String {
    match arguments.get("language").and_then(Value::as_str) {
        Some("javascript") => "Run JavaScript".to_owned(),
        _ => "Run Python".to_owned(),
    }
}

impl RenderHooks for CodeRender {
    fn inspector(&self, api: &str, partial: &Value) -> Card {
        self.placeholder(api, partial)
    }

    fn placeholder(&self, api: &str, arguments: &Value) -> Card {
        match api {
            "runCode" => {
                let mut card = Card::new(title(arguments));
                if let Some(engine) = arguments.get("engine").and_then(Value::as_str) {
                    card = card.subtitle(engine.to_owned());
                }
                match code_block(arguments) {
                    Some(block) => card.block(block),
                    None => card,
                }
            }
            "resetInterpreter" => Card::new("Reset the interpreter"),
            _ => Card::new("Outputs folder"),
        }
    }

    /// The question: the code as code (highlighted, line by line), not its JSON.
    fn intervention(&self, api: &str, arguments: &Value) -> Card {
        let mut card = self.placeholder(api, arguments);
        card.title = format!("Allow: {}", card.title);
        card.badge =
            Some(tool_core::Badge { label: "approval needed".into(), tone: tool_core::Tone::Warning });
        card
    }

    fn result(&self, api: &str, arguments: &Value, output: &ToolOutput) -> Card {
        let mut card = self.placeholder(api, arguments);
        card.badge = Some(status_badge(output));
        let state = output.state.clone().unwrap_or(Value::Null);
        if api != "runCode" {
            return card.block(Block::Markdown { text: output.content.clone() });
        }
        if let Some(engine) = state.get("engine").and_then(Value::as_str) {
            let ms = state.get("duration_ms").and_then(Value::as_u64).unwrap_or(0);
            card = card.subtitle(format!("{engine} · {ms} ms"));
        }
        let text =
            |key: &str| state.get(key).and_then(Value::as_str).filter(|s| !s.is_empty()).map(str::to_owned);
        if let Some(printed) = text("output") {
            card = card.block(Block::Code { language: None, text: printed });
        }
        if let Some(value) = text("value") {
            card = card.fields([("Out", value)]);
        }
        if let Some(error) = text("error") {
            card = card.block(Block::Code { language: None, text: error });
        }
        if let Some(note) = text("note") {
            card = card.block(Block::Markdown { text: format!("_{note}_") });
        }
        for file in state.get("files").and_then(Value::as_array).into_iter().flatten() {
            let field = |key: &str| file.get(key).and_then(Value::as_str).unwrap_or("").to_owned();
            card = card.block(Block::File {
                path: field("path"),
                mime: field("mime"),
                bytes: file.get("bytes").and_then(Value::as_u64).unwrap_or(0),
            });
        }
        if state.is_null() && !output.success {
            card = card.block(Block::Markdown { text: output.content.clone() });
        }
        card
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_question_shows_the_code_as_code_not_json() {
        let arguments = json!({ "code": "import os\nprint(os.getcwd())", "engine": "full" });
        let card = RENDER.intervention("runCode", &arguments);
        assert_eq!(card.title, "Allow: Run Python");
        assert_eq!(
            card.blocks,
            vec![Block::Code {
                language: Some("python".into()),
                text: "import os\nprint(os.getcwd())".into()
            }]
        );
    }

    #[test]
    fn a_run_shows_its_code_output_value_and_images() {
        let arguments = json!({"language": "python", "code": "plot()", "engine": "full"});
        let output = ToolOutput::ok("…").with_state(json!({
            "engine": "full", "duration_ms": 12, "output": "hello\n", "value": "42",
            "files": [{"name": "p.png", "path": "/t/outputs/p.png", "bytes": 10, "mime": "image/png"}]
        }));
        let card = CodeRender.result("runCode", &arguments, &output);
        assert_eq!(card.title, "Run Python");
        assert_eq!(card.subtitle.as_deref(), Some("full · 12 ms"));
        assert!(
            card.blocks.contains(&Block::Code { language: Some("python".into()), text: "plot()".into() })
        );
        assert!(card.blocks.contains(&Block::Code { language: None, text: "hello\n".into() }));
        assert!(card.blocks.contains(&Block::File {
            path: "/t/outputs/p.png".into(),
            mime: "image/png".into(),
            bytes: 10
        }));
    }
}
