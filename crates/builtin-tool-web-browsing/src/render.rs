//! Cards for people: result cards for a search, page cards for a crawl.

use serde_json::Value;
use tool_core::render::{default_result, status_badge};
use tool_core::{Block, Card, RenderHooks, ToolOutput};

use crate::WebApi;

/// Renders searches as result cards and crawls as page cards.
#[derive(Debug, Clone, Copy, Default)]
pub struct WebRender;

/// Characters of a page's text a card shows (the portal shows what the model read).
const CARD_TEXT: usize = 1_200;

fn host_of(url: &str) -> String {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    rest.split(['/', '?', '#']).next().unwrap_or("").trim_start_matches("www.").to_owned()
}

fn head(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_owned(),
    }
}

fn str_of<'a>(value: &'a Value, key: &str) -> &'a str {
    value.get(key).and_then(Value::as_str).unwrap_or("")
}

fn urls_of(arguments: &Value) -> Vec<String> {
    match arguments.get("urls").and_then(Value::as_array) {
        Some(urls) => urls.iter().filter_map(Value::as_str).map(str::to_owned).collect(),
        None => arguments.get("url").and_then(Value::as_str).map(str::to_owned).into_iter().collect(),
    }
}

fn search_results(state: &Value, limit: usize) -> Block {
    let mut text = String::new();
    for (i, hit) in state["results"].as_array().into_iter().flatten().take(limit).enumerate() {
        let url = str_of(hit, "url");
        let mut meta = host_of(url);
        if let Some(date) = hit.get("publishedDate").and_then(Value::as_str) {
            meta.push_str(" · ");
            meta.push_str(date);
        }
        text.push_str(&format!(
            "{}. **[{}]({url})** — {meta}\n   {}\n",
            i + 1,
            str_of(hit, "title").replace(['[', ']'], ""),
            head(str_of(hit, "snippet"), 240)
        ));
    }
    Block::Markdown { text }
}

fn page_cards(card: Card, state: &Value, text_limit: usize) -> Card {
    let mut card = card;
    for page in state["pages"].as_array().into_iter().flatten() {
        let url = str_of(page, "finalUrl");
        let title = page.get("title").and_then(Value::as_str).unwrap_or(url);
        card = card
            .block(Block::Markdown { text: format!("### [{}]({url})", title.replace(['[', ']'], "")) })
            .fields([
                ("Site", host_of(url)),
                ("Published", str_of(page, "publishedTime").to_owned()),
                ("Read by", str_of(page, "crawler").to_owned()),
                (
                    "Characters",
                    format!(
                        "{} of {}",
                        page["shownChars"].as_u64().unwrap_or(0),
                        page["totalChars"].as_u64().unwrap_or(0)
                    ),
                ),
            ])
            .block(Block::Markdown { text: head(str_of(page, "markdown"), text_limit) });
    }
    for error in state["errors"].as_array().into_iter().flatten() {
        card = card.block(Block::Markdown { text: format!("✗ {}", str_of(error, "error")) });
    }
    card
}

impl RenderHooks for WebRender {
    fn inspector(&self, api: &str, partial: &Value) -> Card {
        self.placeholder(api, partial).subtitle("preparing…")
    }

    fn placeholder(&self, api: &str, arguments: &Value) -> Card {
        match api.parse::<WebApi>() {
            Ok(WebApi::Search) => Card::new("Web search").subtitle(str_of(arguments, "query")),
            Ok(_) => {
                Card::new("Read web pages").block(Block::List { items: urls_of(arguments), ordered: false })
            }
            Err(_) => Card::new(api),
        }
    }

    fn result(&self, api: &str, arguments: &Value, output: &ToolOutput) -> Card {
        let Some(state) = &output.state else { return default_result(api, output) };
        let mut card = match api.parse::<WebApi>() {
            Ok(WebApi::Search) => {
                let count = state["results"].as_array().map_or(0, Vec::len);
                let provider = state.get("provider").and_then(Value::as_str).unwrap_or("no provider");
                Card::new("Web search")
                    .subtitle(format!("{} — {count} results from {provider}", str_of(arguments, "query")))
                    .block(search_results(state, 10))
            }
            Ok(_) => page_cards(Card::new("Read web pages"), state, CARD_TEXT),
            Err(_) => return default_result(api, output),
        };
        card.badge = Some(status_badge(output));
        if !output.success {
            card = card.block(Block::Markdown { text: output.content.clone() });
        }
        card
    }

    fn portal(&self, api: &str, arguments: &Value, output: &ToolOutput) -> Card {
        let Some(state) = &output.state else { return default_result(api, output) };
        match api.parse::<WebApi>() {
            Ok(WebApi::Search) => {
                let mut card = self.result(api, arguments, output);
                card.blocks = vec![search_results(state, usize::MAX)];
                let attempts: Vec<String> = state["attempts"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|a| {
                        let outcome = match a.get("error").and_then(Value::as_str) {
                            Some(error) => format!("failed: {error}"),
                            None => format!("{} results", a["hits"].as_u64().unwrap_or(0)),
                        };
                        let relaxed =
                            if a["relaxed"].as_bool() == Some(true) { " (without filters)" } else { "" };
                        format!("{}{relaxed}: {outcome}", str_of(a, "provider"))
                    })
                    .collect();
                card.block(Block::List { items: attempts, ordered: true })
            }
            Ok(_) => page_cards(Card::new("Read web pages"), state, usize::MAX),
            Err(_) => default_result(api, output),
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;
    use tool_core::ToolOutput;

    use super::*;

    #[test]
    fn search_results_become_result_cards() {
        let state = json!({"query": "rust", "provider": "searxng", "results": [
            {"title": "The [Rust] Book", "url": "https://www.doc.example/book/", "snippet": "Learn Rust.", "publishedDate": "2026-01-02"}
        ], "attempts": [{"provider": "brave", "relaxed": false, "hits": 0, "error": "HTTP 401: bad key"},
                         {"provider": "searxng", "relaxed": false, "hits": 1}]});
        let output = ToolOutput::ok("<searchResults/>").with_state(state);
        let card = WebRender.result("search", &json!({"query": "rust"}), &output);
        assert_eq!(card.subtitle.as_deref(), Some("rust — 1 results from searxng"));
        assert_eq!(
            card.blocks[0],
            Block::Markdown { text: "1. **[The Rust Book](https://www.doc.example/book/)** — doc.example · 2026-01-02\n   Learn Rust.\n".into() }
        );
        let portal = WebRender.portal("search", &json!({"query": "rust"}), &output);
        assert_eq!(
            portal.blocks[1],
            Block::List {
                items: vec!["brave: failed: HTTP 401: bad key".into(), "searxng: 1 results".into()],
                ordered: true
            }
        );
    }

    #[test]
    fn pages_become_page_cards_with_a_link_and_their_text() {
        let state = json!({"pages": [{"finalUrl": "https://news.example/a", "title": "A", "crawler": "direct",
            "markdown": "x".repeat(2000), "shownChars": 2000, "totalChars": 9000}], "errors": [{"url": "u", "error": "u could not be read"}]});
        let output = ToolOutput::ok("…").with_state(state);
        let card = WebRender.result("crawlSinglePage", &json!({"url": "https://news.example/a"}), &output);
        assert_eq!(card.blocks[0], Block::Markdown { text: "### [A](https://news.example/a)".into() });
        let Block::Markdown { text } = &card.blocks[2] else { panic!("{:?}", card.blocks) };
        assert_eq!(text.chars().count(), CARD_TEXT + 1);
        assert!(matches!(&card.blocks[3], Block::Markdown { text } if text.contains("could not be read")));
        let placeholder = WebRender.placeholder("crawlMultiPages", &json!({"urls": ["a", "b"]}));
        assert_eq!(
            placeholder.blocks[0],
            Block::List { items: vec!["a".into(), "b".into()], ordered: false }
        );
    }
}
