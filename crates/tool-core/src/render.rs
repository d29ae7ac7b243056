//! A small view model of cards, and the hooks that produce them.
//!
//! Cards know nothing of terminals or HTML: the TUI draws them with ratatui, the server sends them
//! as JSON. Every hook has a generic default, so a tool that renders nothing special still shows
//! something sensible in each of the six places.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::runtime::{Progress, ToolOutput};

/// A card: a title, an optional badge and a list of blocks.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Card {
    /// One-line title.
    pub title: String,
    /// Optional second line.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subtitle: Option<String>,
    /// A status badge beside the title.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub badge: Option<Badge>,
    /// The body.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub blocks: Vec<Block>,
}

impl Card {
    /// A card with a title only.
    pub fn new(title: impl Into<String>) -> Self {
        Self { title: title.into(), ..Self::default() }
    }

    /// Sets the subtitle.
    #[must_use]
    pub fn subtitle(mut self, subtitle: impl Into<String>) -> Self {
        self.subtitle = Some(subtitle.into());
        self
    }

    /// Sets the badge.
    #[must_use]
    pub fn badge(mut self, label: impl Into<String>, tone: Tone) -> Self {
        self.badge = Some(Badge { label: label.into(), tone });
        self
    }

    /// Appends a block.
    #[must_use]
    pub fn block(mut self, block: Block) -> Self {
        self.blocks.push(block);
        self
    }

    /// Appends a fields block from `(label, value)` pairs, skipping empty values.
    #[must_use]
    pub fn fields<L: Into<String>, V: Into<String>>(self, pairs: impl IntoIterator<Item = (L, V)>) -> Self {
        let fields: Vec<Field> = pairs
            .into_iter()
            .map(|(label, value)| Field { label: label.into(), value: value.into() })
            .filter(|field| !field.value.is_empty())
            .collect();
        if fields.is_empty() { self } else { self.block(Block::Fields { fields }) }
    }
}

/// One block of a card body.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Block {
    /// Label/value pairs.
    Fields {
        /// The pairs in order.
        fields: Vec<Field>,
    },
    /// Preformatted text with an optional language for highlighting.
    Code {
        /// Language hint (`rust`, `sh`, `json`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        language: Option<String>,
        /// The text.
        text: String,
    },
    /// A list of short items.
    List {
        /// The items.
        items: Vec<String>,
        /// Numbered or bulleted.
        #[serde(default)]
        ordered: bool,
    },
    /// A table.
    Table {
        /// Column headers.
        headers: Vec<String>,
        /// Rows of cells.
        rows: Vec<Vec<String>>,
    },
    /// A unified diff.
    Diff {
        /// The diff text.
        unified: String,
    },
    /// Markdown text.
    Markdown {
        /// The markdown.
        text: String,
    },
    /// A progress bar or spinner.
    Progress {
        /// What is in progress.
        label: String,
        /// Completion between 0 and 1; `None` is indeterminate.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        fraction: Option<f32>,
    },
    /// A standalone badge.
    Badge(Badge),
    /// A file the call produced (a chart, a table written out): front ends that can show its
    /// type (`image/png`, `image/svg+xml`) show it, others name it.
    File {
        /// Where it is, as the session's file tools read it.
        path: String,
        /// Its media type.
        mime: String,
        /// Its size in bytes.
        bytes: u64,
    },
}

/// A label and its value.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Field {
    /// The label.
    pub label: String,
    /// The value.
    pub value: String,
}

/// A short status label.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Badge {
    /// The text.
    pub label: String,
    /// Its colour class.
    pub tone: Tone,
}

/// Colour classes, mapped to colours by each front end.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Tone {
    /// No emphasis.
    #[default]
    Neutral,
    /// Informational.
    Info,
    /// Succeeded.
    Success,
    /// Needs attention.
    Warning,
    /// Failed or dangerous.
    Danger,
}

/// The six places a call is shown; each hook returns a card for one API.
pub trait RenderHooks: Send + Sync {
    /// While the arguments stream in (`partial` is the best-effort parse so far).
    fn inspector(&self, api: &str, partial: &Value) -> Card {
        Card::new(api).subtitle("preparing…").block(json_block(partial))
    }

    /// Once the call is complete but has not started, or is queued.
    fn placeholder(&self, api: &str, arguments: &Value) -> Card {
        Card::new(api).badge("queued", Tone::Neutral).block(json_block(arguments))
    }

    /// While it runs, with the progress updates received so far.
    fn streaming(&self, api: &str, _arguments: &Value, progress: &[Progress]) -> Card {
        default_streaming(api, progress)
    }

    /// When it has finished.
    fn result(&self, api: &str, _arguments: &Value, output: &ToolOutput) -> Card {
        default_result(api, output)
    }

    /// What a person is asked to approve.
    fn intervention(&self, api: &str, arguments: &Value) -> Card {
        Card::new(format!("Allow {api}?")).badge("approval", Tone::Warning).block(json_block(arguments))
    }

    /// The detail view.
    fn portal(&self, api: &str, arguments: &Value, output: &ToolOutput) -> Card {
        let card = self.result(api, arguments, output).block(json_block(arguments));
        match &output.state {
            Some(state) => card.block(json_block(state)),
            None => card,
        }
    }
}

/// A code block holding pretty-printed JSON.
pub fn json_block(value: &Value) -> Block {
    Block::Code {
        language: Some("json".into()),
        text: serde_json::to_string_pretty(value).unwrap_or_else(|_| value.to_string()),
    }
}

/// Text as an XML attribute value or element body, the compact XML tools answer the model in
/// (`<item title="…">…</item>`): `&`, `<`, `>` and `"` escaped, control characters other than
/// newlines and tabs dropped.
pub fn xml_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            c if c.is_control() && c != '\n' && c != '\t' => {}
            c => out.push(c),
        }
    }
    out
}

/// The badge every result card starts with: done or failed (with the error kind).
pub fn status_badge(output: &ToolOutput) -> Badge {
    match &output.error {
        _ if output.success => Badge { label: "done".into(), tone: Tone::Success },
        Some(error) => Badge { label: error.kind.as_str().into(), tone: Tone::Danger },
        None => Badge { label: "failed".into(), tone: Tone::Danger },
    }
}

/// The default result card: status badge and the content the model read.
pub fn default_result(api: &str, output: &ToolOutput) -> Card {
    let mut card = Card::new(api);
    card.badge = Some(status_badge(output));
    card.block(Block::Code { language: None, text: output.content.clone() })
}

/// The default streaming card: the last message, a progress bar and the output so far.
pub fn default_streaming(api: &str, progress: &[Progress]) -> Card {
    let label = progress.iter().rev().find_map(|p| p.message.clone()).unwrap_or_else(|| "running".into());
    let fraction = progress.iter().rev().find_map(|p| p.fraction);
    let output: String = progress.iter().filter_map(|p| p.output.as_deref()).collect();
    let card = Card::new(api).badge("running", Tone::Info).block(Block::Progress { label, fraction });
    if output.is_empty() { card } else { card.block(Block::Code { language: None, text: output }) }
}

/// Hooks that use every default.
#[derive(Debug, Clone, Copy, Default)]
pub struct DefaultRender;

impl RenderHooks for DefaultRender {}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::ErrorKind;
    use serde_json::json;

    #[test]
    fn defaults_produce_cards_for_each_place() {
        let hooks = DefaultRender;
        let args = json!({"path": "a.txt"});
        assert_eq!(hooks.inspector("readFile", &args).subtitle.as_deref(), Some("preparing…"));
        let failed = ToolOutput::error(ErrorKind::NotFound, "no such file");
        let card = hooks.result("readFile", &args, &failed);
        assert_eq!(card.badge.unwrap().label, "not_found");
        let streaming = hooks.streaming(
            "runCommand",
            &args,
            &[
                Progress {
                    message: Some("building".into()),
                    fraction: Some(0.5),
                    output: Some("a\n".into()),
                },
                Progress { output: Some("b\n".into()), ..Progress::default() },
            ],
        );
        assert_eq!(
            streaming.blocks,
            vec![
                Block::Progress { label: "building".into(), fraction: Some(0.5) },
                Block::Code { language: None, text: "a\nb\n".into() },
            ]
        );
        let portal = hooks.portal("readFile", &args, &ToolOutput::ok("x").with_state(json!({"n": 1})));
        assert_eq!(portal.blocks.len(), 3);
    }

    #[test]
    fn cards_serialise_with_typed_blocks() {
        let card = Card::new("t")
            .fields([("path", "a"), ("empty", "")])
            .block(Block::Diff { unified: "-a\n+b".into() })
            .block(Block::Badge(Badge { label: "new".into(), tone: Tone::Info }));
        let json = serde_json::to_value(&card).unwrap();
        assert_eq!(
            json,
            json!({"title": "t", "blocks": [
                {"type": "fields", "fields": [{"label": "path", "value": "a"}]},
                {"type": "diff", "unified": "-a\n+b"},
                {"type": "badge", "label": "new", "tone": "info"},
            ]})
        );
        let back: Card = serde_json::from_value(json).unwrap();
        assert_eq!(back, card);
    }
}
