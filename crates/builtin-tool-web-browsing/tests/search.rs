//! Every search provider against a scripted loopback server speaking its real JSON shape, and
//! the chain: fallback on failure, one relaxed retry on zero hits, failures that say why.

mod common;

use builtin_tool_web_browsing::settings::{Endpoint, ProviderKind, WebSettings};
use common::{Reply, Script, run};
use serde_json::{Value, json};
use tool_core::ErrorKind;

fn settings(providers: Vec<Endpoint<ProviderKind>>) -> WebSettings {
    WebSettings { providers, ..WebSettings::default() }
}

fn endpoint(kind: ProviderKind, script: &Script) -> Endpoint<ProviderKind> {
    let mut endpoint = Endpoint::new(kind, script.base(), Some("KEY-123"));
    if kind == ProviderKind::Google {
        endpoint.engine_id = Some("CX-9".into());
    }
    endpoint
}

/// Each provider's answer in its own shape, with two results (one dated).
fn answer(kind: ProviderKind) -> Value {
    match kind {
        ProviderKind::Searxng => json!({"query": "q", "number_of_results": 2, "results": [
            {"url": "https://a.example/1", "title": "First", "content": "First  snippet", "engine": "bing",
             "publishedDate": "2026-11-01T00:00:00"},
            {"url": "https://b.example/2", "title": "Second", "content": "Second snippet", "engine": "wikipedia", "publishedDate": null}],
            "unresponsive_engines": []}),
        ProviderKind::Brave => {
            json!({"type": "search", "query": {"original": "q"}, "web": {"type": "search", "results": [
            {"title": "First", "url": "https://a.example/1", "description": "First snippet", "page_age": "2026-11-01T00:00:00"},
            {"title": "Second", "url": "https://b.example/2", "description": "Second snippet"}]}})
        }
        ProviderKind::Tavily => json!({"query": "q", "response_time": 1.2, "results": [
            {"title": "First", "url": "https://a.example/1", "content": "First snippet", "score": 0.9, "published_date": "2026-11-01"},
            {"title": "Second", "url": "https://b.example/2", "content": "Second snippet", "score": 0.5}]}),
        ProviderKind::Exa => json!({"requestId": "r", "results": [
            {"id": "1", "title": "First", "url": "https://a.example/1", "publishedDate": "2026-11-01T00:00:00.000Z", "text": "First snippet"},
            {"id": "2", "title": "Second", "url": "https://b.example/2", "text": "Second snippet"}]}),
        ProviderKind::Jina => json!({"code": 200, "status": 20000, "data": [
            {"title": "First", "url": "https://a.example/1", "description": "First snippet", "date": "2026-11-01"},
            {"title": "Second", "url": "https://b.example/2", "description": "Second snippet"}]}),
        ProviderKind::Google => {
            json!({"kind": "customsearch#search", "searchInformation": {"totalResults": "2"}, "items": [
            {"title": "First", "link": "https://a.example/1", "snippet": "First snippet", "displayLink": "a.example",
             "pagemap": {"metatags": [{"article:published_time": "2026-11-01"}]}},
            {"title": "Second", "link": "https://b.example/2", "snippet": "Second snippet"}]})
        }
        ProviderKind::Kagi => json!({"meta": {"id": "m", "ms": 100}, "data": [
            {"t": 0, "rank": 1, "url": "https://a.example/1", "title": "First", "snippet": "First snippet", "published": "2026-11-01"},
            {"t": 1, "list": ["related one", "related two"]},
            {"t": 0, "rank": 2, "url": "https://b.example/2", "title": "Second", "snippet": "Second snippet"}]}),
        ProviderKind::Search1api => json!({"searchParameters": {"query": "q"}, "results": [
            {"title": "First", "link": "https://a.example/1", "snippet": "First snippet"},
            {"title": "Second", "link": "https://b.example/2", "snippet": "Second snippet"}]}),
    }
}

#[tokio::test]
async fn every_provider_speaks_its_api() {
    for kind in ProviderKind::ALL {
        let script = Script::start(vec![Reply::json(200, answer(kind))]).await;
        let args =
            json!({"query": "rust async", "timeRange": "week", "locale": "de-DE", "categories": ["news"]});
        let output = run(settings(vec![endpoint(kind, &script)]), "search", args).await;
        assert!(output.success, "{kind:?}: {}", output.content);
        assert!(
            output.content.contains(r#"<item index="1" title="First" url="https://a.example/1""#),
            "{kind:?}: {}",
            output.content
        );
        assert!(
            output.content.contains(
                r#"<item index="2" title="Second" url="https://b.example/2">Second snippet</item>"#
            ),
            "{kind:?}: {}",
            output.content
        );
        let seen = script.seen();
        assert_eq!(seen.len(), 1, "{kind:?}");
        let request = &seen[0];
        let query = request.query();
        match kind {
            ProviderKind::Searxng => {
                assert_eq!(request.path, "/search");
                assert_eq!(
                    (query["q"].as_str(), query["format"].as_str()),
                    (Some("rust async"), Some("json"))
                );
                assert_eq!(
                    (query["time_range"].as_str(), query["language"].as_str()),
                    (Some("week"), Some("de-DE"))
                );
                assert_eq!(query["categories"], "news");
                assert!(
                    output.content.contains(r#"publishedDate="2026-11-01T00:00:00">First snippet</item>"#),
                    "{}",
                    output.content
                );
            }
            ProviderKind::Brave => {
                assert_eq!(request.path, "/res/v1/web/search");
                assert_eq!(request.headers["x-subscription-token"], "KEY-123");
                assert_eq!(
                    (query["freshness"].as_str(), query["search_lang"].as_str()),
                    (Some("pw"), Some("de"))
                );
            }
            ProviderKind::Tavily | ProviderKind::Search1api => {
                let path = if kind == ProviderKind::Tavily { "/search" } else { "/news" };
                assert_eq!((request.method.as_str(), request.path.as_str()), ("POST", path));
                assert_eq!(request.headers["authorization"], "Bearer KEY-123");
                let body = request.json();
                assert_eq!(body["query"], "rust async");
                assert_eq!(body["time_range"], "week");
                if kind == ProviderKind::Tavily {
                    assert_eq!(body["topic"], "news");
                }
            }
            ProviderKind::Exa => {
                assert_eq!((request.method.as_str(), request.path.as_str()), ("POST", "/search"));
                assert_eq!(request.headers["x-api-key"], "KEY-123");
                assert_eq!(request.json()["category"], "news");
                let since = request.json()["startPublishedDate"].as_str().unwrap().to_owned();
                assert!(since.len() == 10 && since.as_str() > "2020", "{since}");
            }
            ProviderKind::Jina => {
                assert_eq!(request.path, "/");
                assert_eq!(query["q"], "rust async");
                assert_eq!(request.headers["authorization"], "Bearer KEY-123");
                assert_eq!(request.headers["accept"], "application/json");
            }
            ProviderKind::Google => {
                assert_eq!(request.path, "/customsearch/v1");
                assert_eq!(query["cx"], "CX-9");
                assert!(query.get("key").is_none(), "the key is not in the URL");
                assert_eq!(request.headers["x-goog-api-key"], "KEY-123");
                assert_eq!(
                    (query["dateRestrict"].as_str(), query["lr"].as_str()),
                    (Some("w1"), Some("lang_de"))
                );
                assert!(output.content.contains(r#"publishedDate="2026-11-01""#));
            }
            ProviderKind::Kagi => {
                assert_eq!(request.path, "/api/v0/search");
                assert_eq!(request.headers["authorization"], "Bot KEY-123");
                assert!(!output.content.contains("related one"), "related searches are not results");
            }
        }
        let state = output.state.unwrap();
        assert_eq!(state["provider"], kind.name());
        assert_eq!(state["results"].as_array().unwrap().len(), 2);
    }
}

#[tokio::test]
async fn a_failing_provider_hands_over_and_its_reason_is_reported() {
    let brave = Script::start(vec![Reply::json(
        401,
        json!({"type": "ErrorResponse", "error": {"id": "x", "status": 401, "code": "SUBSCRIPTION_TOKEN_INVALID", "detail": "The provided subscription token is invalid."}}),
    )])
    .await;
    let searxng = Script::start(vec![Reply::json(200, answer(ProviderKind::Searxng))]).await;
    let chain = vec![endpoint(ProviderKind::Brave, &brave), endpoint(ProviderKind::Searxng, &searxng)];
    let output = run(settings(chain), "search", json!({"query": "harbour"})).await;
    assert!(output.success);
    assert!(
        output.content.ends_with(
            "Note: brave failed (HTTP 401: The provided subscription token is invalid.); these results come from searxng."
        ),
        "{}",
        output.content
    );
    let state = output.state.unwrap();
    assert_eq!(state["attempts"][0]["error"], "HTTP 401: The provided subscription token is invalid.");
    assert_eq!(state["attempts"][1]["hits"], 2);
}

#[tokio::test]
async fn zero_hits_are_retried_once_without_the_filters() {
    let searxng = Script::start(vec![
        Reply::json(200, json!({"query": "q", "results": []})),
        Reply::json(200, answer(ProviderKind::Searxng)),
    ])
    .await;
    let args = json!({"query": "obscure thing", "timeRange": "day", "engines": ["arxiv"]});
    let output = run(settings(vec![endpoint(ProviderKind::Searxng, &searxng)]), "search", args).await;
    assert!(output.success && output.content.contains("<item index=\"1\""), "{}", output.content);
    let seen = searxng.seen();
    assert_eq!(seen.len(), 2);
    assert_eq!(seen[0].query()["engines"], "arxiv");
    assert!(seen[1].query().get("engines").is_none() && seen[1].query().get("time_range").is_none());
    assert_eq!(output.state.unwrap()["attempts"][1]["relaxed"], true);

    // Without filters there is nothing to relax: one request, then an honest empty answer.
    let empty = Script::start(vec![Reply::json(200, json!({"results": []}))]).await;
    let output =
        run(settings(vec![endpoint(ProviderKind::Searxng, &empty)]), "search", json!({"query": "zzqx"}))
            .await;
    assert!(output.success);
    assert_eq!(
        output.content,
        "No results for \"zzqx\" (searched searxng). Answer from what you know, or rewrite the query with fewer or \
         different words and search again."
    );
    assert_eq!(empty.seen().len(), 1);
}

#[tokio::test]
async fn when_every_provider_fails_the_model_is_told_why_not_no_results() {
    let tavily = Script::start(vec![Reply::json(
        432,
        json!({"detail": {"error": "This request exceeds your plan's set usage limit."}}),
    )])
    .await;
    let kagi = Script::start(vec![Reply::json(
        200,
        json!({"meta": {}, "data": null, "error": [{"code": 1, "msg": "Insufficient credit"}]}),
    )])
    .await;
    let searxng = Script::start(vec![Reply::text(403, "<html>Forbidden</html>")]).await;
    let jina = Script::start(vec![Reply::text(200, "<html>not json</html>")]).await;
    let chain = vec![
        endpoint(ProviderKind::Tavily, &tavily),
        endpoint(ProviderKind::Kagi, &kagi),
        endpoint(ProviderKind::Searxng, &searxng),
        endpoint(ProviderKind::Jina, &jina),
    ];
    let output = run(settings(chain), "search", json!({"query": "anything"})).await;
    assert!(!output.success);
    assert_eq!(output.error.as_ref().unwrap().kind, ErrorKind::Execution);
    for reason in [
        "tavily: HTTP 432: This request exceeds your plan's set usage limit.",
        "kagi: HTTP 200: Insufficient credit",
        "searxng: HTTP 403: <html>Forbidden</html>",
        "jina: the answer is not JSON (<html>not json</html>)",
    ] {
        assert!(output.content.contains(reason), "{reason} missing in {}", output.content);
    }
    assert!(output.content.contains("This is not an empty result"));

    let output = run(settings(vec![]), "search", json!({"query": "anything"})).await;
    assert!(
        !output.success && output.content.contains("no search provider is configured"),
        "{}",
        output.content
    );
    let output = run(settings(vec![]), "search", json!({"query": "  "})).await;
    assert_eq!(output.error.unwrap().kind, ErrorKind::InvalidArguments);
}

#[tokio::test]
async fn the_model_reads_at_most_thirty_items_and_people_get_them_all() {
    let results: Vec<Value> = (0..45)
        .map(|i| json!({"url": format!("https://r.example/{i}"), "title": format!("R <{i}> & \"q\""), "content": "s"}))
        .collect();
    let searxng = Script::start(vec![Reply::json(200, json!({"results": results}))]).await;
    let output =
        run(settings(vec![endpoint(ProviderKind::Searxng, &searxng)]), "search", json!({"query": "many"}))
            .await;
    assert_eq!(output.content.matches("<item ").count(), 30);
    assert!(output.content.contains(r#"title="R &lt;0&gt; &amp; &quot;q&quot;""#), "{}", output.content);
    assert!(output.content.starts_with(r#"<searchResults query="many" provider="searxng" count="30">"#));
    assert_eq!(output.state.unwrap()["results"].as_array().unwrap().len(), 45);
}

#[tokio::test]
async fn provider_errors_never_show_the_key() {
    // Nothing listens on this port: the provider's failure is a connection error.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let mut google =
        Endpoint::new(ProviderKind::Google, format!("http://127.0.0.1:{closed}"), Some("SECRET-KEY"));
    google.engine_id = Some("CX".into());
    let output = run(settings(vec![google]), "search", json!({"query": "anything"})).await;
    assert!(!output.success);
    assert!(output.content.contains("google: "), "{}", output.content);
    assert!(!output.content.contains("SECRET-KEY"), "{}", output.content);
    assert!(!output.state.unwrap().to_string().contains("SECRET-KEY"));
}

#[tokio::test]
async fn snippets_are_plain_text_and_only_web_links_are_results() {
    let brave = Script::start(vec![Reply::json(200, json!({"web": {"results": [
        {"title": "A <strong>bold</strong> title", "url": "https://a.example/", "description": "Some <strong>Rust</strong> &amp; more"},
        {"title": "Bad", "url": "javascript:alert(1)", "description": "x"}]}}))])
    .await;
    let output =
        run(settings(vec![endpoint(ProviderKind::Brave, &brave)]), "search", json!({"query": "q"})).await;
    assert!(
        output
            .content
            .contains(r#"title="A bold title" url="https://a.example/">Some Rust &amp; more</item>"#),
        "{}",
        output.content
    );
    assert!(!output.content.contains("javascript"), "{}", output.content);
}

#[tokio::test]
async fn a_provider_answer_that_redirects_is_not_followed() {
    let elsewhere = Script::start(vec![Reply::json(200, answer(ProviderKind::Searxng))]).await;
    let searxng = Script::start(vec![Reply::redirect(&elsewhere.url("/search?format=json"))]).await;
    let output =
        run(settings(vec![endpoint(ProviderKind::Searxng, &searxng)]), "search", json!({"query": "q"})).await;
    assert!(!output.success);
    assert!(output.content.contains("redirected more than 0 times"), "{}", output.content);
    assert!(elsewhere.seen().is_empty(), "the redirect's target was never asked");
}
