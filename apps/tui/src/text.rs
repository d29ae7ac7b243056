//! Cards as plain text, for the modes without a screen.

use tool_core::Card;
use tool_core::render::Block;

/// The blocks of a card as indented plain text, one line per line, never hard-wrapped (so copied
/// text is the text itself).
pub fn card_body(card: &Card, indent: &str) -> String {
    let mut out = String::new();
    let mut push = |line: &str| {
        out.push_str(indent);
        out.push_str(line);
        out.push('\n');
    };
    for block in &card.blocks {
        match block {
            Block::Fields { fields } => {
                for field in fields {
                    push(&format!("{}: {}", field.label, field.value));
                }
            }
            Block::Code { text, .. } | Block::Markdown { text } => text.lines().for_each(&mut push),
            Block::Diff { unified } => unified.lines().for_each(&mut push),
            Block::List { items, ordered } => {
                for (n, item) in items.iter().enumerate() {
                    if *ordered {
                        push(&format!("{}. {item}", n + 1));
                    } else {
                        push(&format!("- {item}"));
                    }
                }
            }
            Block::Table { headers, rows } => {
                push(&headers.join(" | "));
                for row in rows {
                    push(&row.join(" | "));
                }
            }
            other => {
                if let Ok(value) = serde_json::to_string(other) {
                    push(&value);
                }
            }
        }
    }
    out
}
