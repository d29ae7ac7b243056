//! Render hooks: cards for every API in each of the six places.

use serde_json::Value;
use tool_core::render::{default_streaming, status_badge};
use tool_core::{Block, Card, Progress, RenderHooks, Tone, ToolOutput};

use crate::manifest::LocalSystemApi;

/// How a person sees local-system calls.
#[derive(Debug, Clone, Copy, Default)]
pub struct LocalSystemRender;

const PREVIEW_LINES: usize = 40;

fn text<'a>(value: &'a Value, key: &str) -> &'a str {
    value.get(key).and_then(Value::as_str).unwrap_or_default()
}

/// At most [`PREVIEW_LINES`] of `body`: its head and its tail, with how many lines are between
/// (a test run ends with what failed; a person must see the end as well as the start).
fn preview(body: &str) -> String {
    let lines: Vec<&str> = body.lines().collect();
    if lines.len() <= PREVIEW_LINES {
        return lines.join("\n");
    }
    let (head, tail) = (PREVIEW_LINES / 2, PREVIEW_LINES - PREVIEW_LINES / 2);
    let hidden = lines.len() - head - tail;
    format!(
        "{}\n… {hidden} more lines …\n{}",
        lines[..head].join("\n"),
        lines[lines.len() - tail..].join("\n")
    )
}

/// Title and key fields of a call from its (possibly partial) arguments.
fn headline(api: &str, args: &Value) -> Card {
    let Ok(api) = api.parse::<LocalSystemApi>() else { return Card::new(api) };
    match api {
        LocalSystemApi::ReadFile => {
            // Only the range the call gave: a missing or null offset is no field at all.
            let range: Vec<(&str, String)> = ["offset", "limit"]
                .into_iter()
                .filter_map(|key| args.get(key).filter(|v| !v.is_null()).map(|v| (key, v.to_string())))
                .collect();
            Card::new(format!("Read {}", text(args, "path"))).fields(range)
        }
        LocalSystemApi::WriteFile => Card::new(format!("Write {}", text(args, "path"))),
        LocalSystemApi::EditFile => Card::new(format!("Edit {}", text(args, "path"))),
        LocalSystemApi::SearchFiles => Card::new(format!("Find files named “{}”", text(args, "query")))
            .fields([("in", text(args, "directory"))]),
        LocalSystemApi::MoveFiles => {
            let moves: Vec<String> = args
                .get("items")
                .and_then(Value::as_array)
                .map(|items| {
                    items.iter().map(|i| format!("{} → {}", text(i, "oldPath"), text(i, "newPath"))).collect()
                })
                .unwrap_or_default();
            Card::new(format!("Move {} item(s)", moves.len()))
                .block(Block::List { items: moves, ordered: false })
        }
        LocalSystemApi::GlobFiles => {
            Card::new(format!("Glob {}", text(args, "pattern"))).fields([("in", text(args, "directory"))])
        }
        LocalSystemApi::GrepContent => Card::new(format!("Grep “{}”", text(args, "pattern")))
            .fields([("in", text(args, "path")), ("files", text(args, "glob"))]),
        LocalSystemApi::RunCommand => Card::new(text(args, "description").to_owned())
            .block(Block::Code { language: Some("sh".into()), text: text(args, "command").to_owned() }),
        LocalSystemApi::GetCommandOutput => Card::new(format!("Output of {}", text(args, "commandId"))),
        LocalSystemApi::KillCommand => Card::new(format!("Kill {}", text(args, "commandId"))),
        LocalSystemApi::ResolveChange => {
            let verb = if text(args, "action") == "discard" { "Discard" } else { "Apply" };
            Card::new(format!("{verb} the previewed change {}", text(args, "token")))
        }
    }
    .subtitle_if_empty(api.name())
}

trait TitleFallback {
    fn subtitle_if_empty(self, api: &str) -> Card;
}

impl TitleFallback for Card {
    fn subtitle_if_empty(mut self, api: &str) -> Card {
        if self.title.trim().is_empty() {
            self.title = api.to_owned();
        }
        self
    }
}

impl RenderHooks for LocalSystemRender {
    fn inspector(&self, api: &str, partial: &Value) -> Card {
        headline(api, partial).badge("preparing", Tone::Neutral)
    }

    fn placeholder(&self, api: &str, arguments: &Value) -> Card {
        headline(api, arguments).badge("queued", Tone::Neutral)
    }

    fn streaming(&self, api: &str, arguments: &Value, progress: &[Progress]) -> Card {
        let mut card = headline(api, arguments);
        card.badge = Some(tool_core::Badge { label: "running".into(), tone: Tone::Info });
        card.blocks.extend(default_streaming(api, progress).blocks);
        card
    }

    fn result(&self, api: &str, arguments: &Value, output: &ToolOutput) -> Card {
        let mut card = headline(api, arguments);
        card.badge = Some(status_badge(output));
        let state = output.state.as_ref().unwrap_or(&Value::Null);
        let body = match (api.parse::<LocalSystemApi>(), output.success) {
            (Ok(LocalSystemApi::ReadFile), true) => {
                Some(Block::Code { language: None, text: preview(text(state, "content")) })
            }
            (Ok(LocalSystemApi::EditFile), true) => {
                Some(Block::Diff { unified: text(state, "diff").to_owned() })
            }
            // A file written over shows what changed; a new one, its content (head and tail),
            // highlighted by its extension.
            (Ok(LocalSystemApi::WriteFile), true) if !text(state, "diff").is_empty() => {
                Some(Block::Diff { unified: text(state, "diff").to_owned() })
            }
            (Ok(LocalSystemApi::WriteFile), true) if !text(arguments, "content").is_empty() => {
                let language = std::path::Path::new(text(arguments, "path"))
                    .extension()
                    .and_then(|e| e.to_str())
                    .map(str::to_owned);
                Some(Block::Code { language, text: preview(text(arguments, "content")) })
            }
            (Ok(LocalSystemApi::SearchFiles | LocalSystemApi::GlobFiles), true) => {
                let items: Vec<String> = state["paths"]
                    .as_array()
                    .map(|paths| paths.iter().filter_map(Value::as_str).map(str::to_owned).collect())
                    .unwrap_or_default();
                Some(Block::List { items, ordered: false })
            }
            (Ok(LocalSystemApi::GrepContent), true) => {
                let rows: Vec<Vec<String>> = state["matches"]
                    .as_array()
                    .map(|matches| {
                        matches
                            .iter()
                            .map(|m| {
                                vec![
                                    text(m, "path").to_owned(),
                                    m["line"].to_string(),
                                    text(m, "text").to_owned(),
                                ]
                            })
                            .collect()
                    })
                    .unwrap_or_default();
                Some(Block::Table { headers: vec!["file".into(), "line".into(), "text".into()], rows })
            }
            _ => Some(Block::Code { language: None, text: preview(&output.content) }),
        };
        card.blocks.extend(body);
        card
    }

    fn intervention(&self, api: &str, arguments: &Value) -> Card {
        let mut card = headline(api, arguments);
        card.title = format!("Allow: {}", card.title);
        card.badge = Some(tool_core::Badge { label: "approval needed".into(), tone: Tone::Warning });
        match api.parse::<LocalSystemApi>() {
            Ok(LocalSystemApi::WriteFile) => {
                card.block(Block::Code { language: None, text: preview(text(arguments, "content")) })
            }
            Ok(LocalSystemApi::EditFile) => {
                let mut pairs: Vec<(String, String)> = Vec::new();
                if let Some(edits) = arguments.get("edits").and_then(Value::as_array) {
                    pairs.extend(
                        edits.iter().map(|e| (text(e, "oldText").to_owned(), text(e, "newText").to_owned())),
                    );
                } else {
                    pairs
                        .push((text(arguments, "oldText").to_owned(), text(arguments, "newText").to_owned()));
                }
                let unified = pairs
                    .iter()
                    .map(|(old, new)| {
                        let minus: String = old.lines().map(|l| format!("-{l}\n")).collect();
                        let plus: String = new.lines().map(|l| format!("+{l}\n")).collect();
                        format!("{minus}{plus}")
                    })
                    .collect::<Vec<_>>()
                    .join("@@\n");
                card.block(Block::Diff { unified })
            }
            _ => card,
        }
    }

    fn portal(&self, api: &str, arguments: &Value, output: &ToolOutput) -> Card {
        let card = self.result(api, arguments, output);
        match &output.state {
            Some(state) => card.block(tool_core::render::json_block(state)),
            None => card,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_read_shows_only_the_range_it_was_given_and_an_overwrite_its_diff() {
        let hooks = LocalSystemRender;
        let read = hooks.placeholder("readFile", &json!({"path": "a.rs", "offset": null, "limit": 20}));
        let fields = serde_json::to_string(&read.blocks).unwrap();
        assert!(!fields.contains("offset") && fields.contains("limit"), "{fields}");
        let diff = "--- /w/a.txt\n+++ /w/a.txt\n@@ -1 +1 @@\n-a\n+b\n";
        let written = ToolOutput::ok("Wrote a.txt").with_state(json!({"diff": diff}));
        let card = hooks.result("writeFile", &json!({"path": "/w/a.txt"}), &written);
        assert!(
            matches!(&card.blocks[..], [Block::Diff { unified }] if unified == diff),
            "{:?}",
            card.blocks
        );
        // A new file (no diff): its content, highlighted by its extension.
        let created = ToolOutput::ok("Wrote src/new.rs (2 lines)").with_state(json!({"diff": ""}));
        let card = hooks.result(
            "writeFile",
            &json!({"path": "src/new.rs", "content": "fn a() {}\nfn b() {}\n"}),
            &created,
        );
        assert_eq!(
            card.blocks,
            vec![Block::Code { language: Some("rs".into()), text: "fn a() {}\nfn b() {}".into() }]
        );
    }

    /// A long command's card shows how it ended: 200 000 lines ending in `FAILED` show the head,
    /// the count between, and the tail with `FAILED`.
    #[test]
    fn a_long_output_shows_its_head_and_its_tail() {
        let mut output: String = (1..200_000).map(|n| format!("test case {n} ... ok\n")).collect();
        output.push_str("test result: FAILED. 1 failed\n");
        let card = LocalSystemRender.result(
            "runCommand",
            &json!({"command": "cargo test"}),
            &ToolOutput::ok(output),
        );
        let Some(Block::Code { text, .. }) = card.blocks.last() else { panic!("{:?}", card.blocks) };
        assert!(text.starts_with("test case 1 ... ok\n"), "{text}");
        assert!(text.contains("… 199960 more lines …"), "{text}");
        assert!(text.ends_with("test result: FAILED. 1 failed"), "{text}");
        assert_eq!(text.lines().count(), PREVIEW_LINES + 1);
    }

    #[test]
    fn every_api_renders_in_every_place() {
        let hooks = LocalSystemRender;
        let args = json!({"path": "a.rs", "command": "ls", "pattern": "x", "query": "q", "commandId": "cmd-1", "items": [{"oldPath": "a", "newPath": "b"}]});
        let ok = ToolOutput::ok("content").with_state(json!({"content": "line", "diff": "-a\n+b", "paths": ["p"], "matches": [{"path": "p", "line": 3, "text": "t"}]}));
        for api in LocalSystemApi::ALL {
            let name = api.name();
            for card in [
                hooks.inspector(name, &args),
                hooks.placeholder(name, &args),
                hooks.streaming(name, &args, &[]),
                hooks.result(name, &args, &ok),
                hooks.intervention(name, &args),
                hooks.portal(name, &args, &ok),
            ] {
                assert!(!card.title.is_empty(), "{name}");
                assert!(card.badge.is_some(), "{name}");
            }
        }
        let edit = hooks.intervention("editFile", &json!({"path": "a", "oldText": "x\ny", "newText": "z"}));
        assert_eq!(edit.blocks, vec![Block::Diff { unified: "-x\n-y\n+z\n".into() }]);
        let grep = hooks.result("grepContent", &args, &ok);
        assert_eq!(
            grep.blocks[1],
            Block::Table {
                headers: vec!["file".into(), "line".into(), "text".into()],
                rows: vec![vec!["p".into(), "3".into(), "t".into()]]
            }
        );
    }
}
