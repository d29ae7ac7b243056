//! Search providers behind one trait, and the chain that asks them in turn.

use std::fmt::Write as _;

use futures::future::BoxFuture;
use safe_fetch::Url;
use safe_fetch::{Fetcher, Request};
use serde::Serialize;
use serde_json::{Value, json};

use crate::settings::{Endpoint, ProviderKind};
use crate::{Category, MAX_RESULTS, SearchArgs, TimeRange};

/// One result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Hit {
    /// The page's title.
    pub title: String,
    /// Its URL.
    pub url: String,
    /// What the provider says about it.
    pub snippet: String,
    /// When it was published, as the provider gave it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub published_date: Option<String>,
    /// The engine that found it (SearXNG).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub engine: Option<String>,
}

/// Why a provider gave no answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}{message}", status.map(|s| format!("HTTP {s}: ")).unwrap_or_default())]
pub struct ProviderError {
    /// The HTTP status, when there was one.
    pub status: Option<u16>,
    /// The provider's message, or what went wrong on the way.
    pub message: String,
}

impl ProviderError {
    fn new(message: impl Into<String>) -> Self {
        Self { status: None, message: message.into() }
    }
}

/// A search provider.
pub trait SearchProvider: Send + Sync {
    /// Its name.
    fn name(&self) -> &'static str;
    /// Runs a query.
    fn search<'a>(&'a self, query: &'a SearchArgs) -> BoxFuture<'a, Result<Vec<Hit>, ProviderError>>;
}

/// A provider reached over HTTP, speaking one of the known APIs.
#[derive(Debug, Clone)]
pub struct HttpProvider {
    endpoint: Endpoint<ProviderKind>,
    fetcher: Fetcher,
}

impl HttpProvider {
    /// A provider at its endpoint.
    pub fn new(endpoint: Endpoint<ProviderKind>, fetcher: Fetcher) -> Self {
        Self { endpoint, fetcher }
    }

    fn key(&self) -> &str {
        self.endpoint.key.as_ref().map_or("", |k| k.0.as_str())
    }

    fn request(&self, query: &SearchArgs) -> Result<Request, ProviderError> {
        let base = &self.endpoint.base;
        let q = query.query.as_str();
        let lang = query.locale.as_deref();
        let time = query.time_range;
        let news = query.categories.as_ref().is_some_and(|c| c.contains(&Category::News));
        let url = |path: &str, params: &[(&str, Option<&str>)]| -> Result<String, ProviderError> {
            let mut url = Url::parse(&format!("{base}{path}"))
                .map_err(|e| ProviderError::new(format!("the configured URL {base} is invalid: {e}")))?;
            {
                let mut pairs = url.query_pairs_mut();
                for (key, value) in params {
                    if let Some(value) = value {
                        pairs.append_pair(key, value);
                    }
                }
            }
            Ok(url.into())
        };
        let json_post = |path: &str, body: Value| -> Result<Request, ProviderError> {
            Ok(Request::post(url(path, &[])?, "application/json", body.to_string()))
        };
        let header = |name: &'static str| safe_fetch::header::HeaderName::from_static(name);
        let accept_json = |r: Request| r.header(safe_fetch::header::ACCEPT, "application/json");
        Ok(accept_json(match self.endpoint.kind {
            ProviderKind::Searxng => {
                let categories = query
                    .categories
                    .as_ref()
                    .map(|c| c.iter().map(|c| c.as_str()).collect::<Vec<_>>().join(","));
                let engines = query.engines.as_ref().map(|e| e.join(","));
                Request::get(url(
                    "/search",
                    &[
                        ("q", Some(q)),
                        ("format", Some("json")),
                        ("categories", categories.as_deref()),
                        ("engines", engines.as_deref()),
                        ("time_range", time.map(TimeRange::as_str)),
                        ("language", lang),
                    ],
                )?)
            }
            ProviderKind::Brave => {
                let freshness = time.map(|t| match t {
                    TimeRange::Day => "pd",
                    TimeRange::Week => "pw",
                    TimeRange::Month => "pm",
                    TimeRange::Year => "py",
                });
                let search_lang = lang.map(brave_language);
                Request::get(url(
                    "/res/v1/web/search",
                    &[
                        ("q", Some(q)),
                        ("count", Some("20")),
                        ("freshness", freshness),
                        ("search_lang", search_lang.as_deref()),
                    ],
                )?)
                .header(header("x-subscription-token"), self.key())
            }
            ProviderKind::Tavily => {
                let mut body = json!({"query": q, "max_results": 20, "search_depth": "basic",
                    "topic": if news { "news" } else { "general" }});
                if let Some(t) = time {
                    body["time_range"] = json!(t.as_str());
                }
                json_post("/search", body)?
                    .header(safe_fetch::header::AUTHORIZATION, &format!("Bearer {}", self.key()))
            }
            ProviderKind::Exa => {
                let mut body = json!({"query": q, "numResults": 20, "type": "auto",
                    "contents": {"text": {"maxCharacters": 600}}});
                if news {
                    body["category"] = json!("news");
                }
                if let Some(t) = time {
                    body["startPublishedDate"] = json!(since(t));
                }
                json_post("/search", body)?.header(header("x-api-key"), self.key())
            }
            ProviderKind::Jina => Request::get(url("/", &[("q", Some(q))])?)
                .header(safe_fetch::header::AUTHORIZATION, &format!("Bearer {}", self.key()))
                .header(header("x-respond-with"), "no-content"),
            ProviderKind::Google => {
                let date = time.map(|t| match t {
                    TimeRange::Day => "d1",
                    TimeRange::Week => "w1",
                    TimeRange::Month => "m1",
                    TimeRange::Year => "y1",
                });
                let lr = lang.map(google_language);
                Request::get(url(
                    "/customsearch/v1",
                    &[
                        ("cx", self.endpoint.engine_id.as_deref()),
                        ("q", Some(q)),
                        ("num", Some("10")),
                        ("dateRestrict", date),
                        ("lr", lr.as_deref()),
                    ],
                )?)
                // The key in a header, not the query string, so no URL in a message carries it.
                .header(header("x-goog-api-key"), self.key())
            }
            ProviderKind::Kagi => {
                Request::get(url("/api/v0/search", &[("q", Some(q)), ("limit", Some("20"))])?)
                    .header(safe_fetch::header::AUTHORIZATION, &format!("Bot {}", self.key()))
            }
            ProviderKind::Search1api => {
                // News has its own endpoint; `search_service` picks the engine behind either.
                let mut body = json!({"query": q, "search_service": if news { "bing" } else { "google" },
                    "max_results": 20, "crawl_results": 0});
                if let Some(t) = time {
                    body["time_range"] = json!(t.as_str());
                }
                if let Some(l) = lang {
                    body["language"] = json!(l);
                }
                json_post(if news { "/news" } else { "/search" }, body)?
                    .header(safe_fetch::header::AUTHORIZATION, &format!("Bearer {}", self.key()))
            }
        }))
    }

    fn hits(&self, body: &Value) -> Result<Vec<Hit>, ProviderError> {
        let text = |v: &Value, keys: &[&str]| -> String {
            keys.iter().find_map(|k| v.get(*k).and_then(Value::as_str)).unwrap_or("").trim().to_owned()
        };
        let date =
            |v: &Value, keys: &[&str]| -> Option<String> { Some(text(v, keys)).filter(|d| !d.is_empty()) };
        let list = |pointer: &str| -> Result<Vec<Value>, ProviderError> {
            match body.pointer(pointer) {
                Some(Value::Array(items)) => Ok(items.clone()),
                None | Some(Value::Null) => Ok(Vec::new()),
                Some(_) => Err(ProviderError::new(format!("unexpected answer: `{pointer}` is not a list"))),
            }
        };
        let kind = self.endpoint.kind;
        let items = match kind {
            ProviderKind::Searxng | ProviderKind::Tavily | ProviderKind::Exa | ProviderKind::Search1api => {
                list("/results")?
            }
            ProviderKind::Brave => list("/web/results")?,
            ProviderKind::Jina => list("/data")?,
            ProviderKind::Google => list("/items")?,
            ProviderKind::Kagi => list("/data")?
                .into_iter()
                .filter(|item| item.get("t").and_then(Value::as_i64) == Some(0))
                .collect(),
        };
        Ok(items
            .iter()
            .map(|item| Hit {
                title: plain(&text(item, &["title"])),
                url: text(item, &["url", "link"]),
                snippet: plain(&text(item, &["content", "description", "snippet", "text"])),
                published_date: match kind {
                    ProviderKind::Google => item
                        .pointer("/pagemap/metatags/0/article:published_time")
                        .and_then(Value::as_str)
                        .map(str::to_owned),
                    _ => date(item, &["publishedDate", "published_date", "page_age", "date", "published"]),
                },
                engine: date(item, &["engine"]),
            })
            // Only web links: a `javascript:` or `data:` URL is nothing to cite or to open.
            .filter(|hit| hit.url.starts_with("https://") || hit.url.starts_with("http://"))
            .collect())
    }
}

impl SearchProvider for HttpProvider {
    fn name(&self) -> &'static str {
        self.endpoint.kind.name()
    }

    fn search<'a>(&'a self, query: &'a SearchArgs) -> BoxFuture<'a, Result<Vec<Hit>, ProviderError>> {
        Box::pin(async move {
            let request = self.request(query)?;
            let response = self.fetcher.send(request).await.map_err(|e| ProviderError::new(e.to_string()))?;
            let body: Option<Value> = serde_json::from_slice(&response.body).ok();
            if !response.status.is_success() {
                let message = body
                    .as_ref()
                    .and_then(error_message)
                    .unwrap_or_else(|| snippet_of(&String::from_utf8_lossy(&response.body), 200));
                return Err(ProviderError { status: Some(response.status.as_u16()), message });
            }
            let body = body.ok_or_else(|| {
                ProviderError::new(format!(
                    "the answer is not JSON ({})",
                    snippet_of(&String::from_utf8_lossy(&response.body), 120)
                ))
            })?;
            if let Some(message) = in_band_error(&body) {
                return Err(ProviderError { status: Some(response.status.as_u16()), message });
            }
            self.hits(&body)
        })
    }
}

/// The message of a JSON error body, in the shapes the providers use.
fn error_message(body: &Value) -> Option<String> {
    let pointers =
        ["/error/message", "/error/detail", "/detail/error", "/error/0/msg", "/message", "/detail", "/error"];
    pointers
        .iter()
        .find_map(|p| body.pointer(p).and_then(Value::as_str))
        .map(str::to_owned)
        .or_else(|| body.pointer("/errors/0/message").and_then(Value::as_str).map(str::to_owned))
}

/// Errors some providers send with a 200 (Kagi's `error` list, Jina's `code`).
fn in_band_error(body: &Value) -> Option<String> {
    if let Some(errors) = body.get("error").and_then(Value::as_array).filter(|e| !e.is_empty()) {
        return errors[0].get("msg").and_then(Value::as_str).map(str::to_owned);
    }
    match body.get("code").and_then(Value::as_u64) {
        Some(code) if code >= 400 => error_message(body).or(Some(format!("error code {code}"))),
        _ => None,
    }
}

fn collapse(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Text without the markup some providers put in snippets (Brave's `<strong>`), entities decoded.
fn plain(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut in_tag = false;
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            // A tag starts with a letter, `/` or `!`; a lone `<` is text.
            '<' if !in_tag
                && chars.peek().is_some_and(|n| n.is_ascii_alphabetic() || *n == '/' || *n == '!') =>
            {
                in_tag = true;
            }
            '>' if in_tag => in_tag = false,
            c if !in_tag => out.push(c),
            _ => {}
        }
    }
    let decoded = out
        .replace("&quot;", "\"")
        .replace("&#39;", "'")
        .replace("&#x27;", "'")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&nbsp;", " ")
        .replace("&amp;", "&");
    collapse(&decoded)
}

/// Brave's `search_lang` codes: mostly ISO 639-1, with script and region variants of its own.
fn brave_language(tag: &str) -> String {
    let tag = tag.to_ascii_lowercase().replace('_', "-");
    let primary = tag.split('-').next().unwrap_or(&tag).to_owned();
    match (primary.as_str(), tag.as_str()) {
        ("zh", "zh-tw" | "zh-hk" | "zh-hant" | "zh-mo") => "zh-hant".into(),
        ("zh", _) => "zh-hans".into(),
        ("pt", "pt-br") => "pt-br".into(),
        ("pt", _) => "pt-pt".into(),
        ("en", "en-gb") => "en-gb".into(),
        ("ja", _) => "jp".into(),
        _ => primary,
    }
}

/// Google's `lr` values: `lang_xx`, and `lang_zh-CN` / `lang_zh-TW` for Chinese.
fn google_language(tag: &str) -> String {
    let tag = tag.replace('_', "-");
    let lower = tag.to_ascii_lowercase();
    let primary = lower.split('-').next().unwrap_or(&lower).to_owned();
    match (primary.as_str(), lower.as_str()) {
        ("zh", "zh-tw" | "zh-hk" | "zh-hant" | "zh-mo") => "lang_zh-TW".into(),
        ("zh", _) => "lang_zh-CN".into(),
        _ => format!("lang_{primary}"),
    }
}

/// The first day of a time range, as `YYYY-MM-DD` (UTC).
fn since(range: TimeRange) -> String {
    let days = match range {
        TimeRange::Day => 1,
        TimeRange::Week => 7,
        TimeRange::Month => 31,
        TimeRange::Year => 366,
    };
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    tool_core::manifest::civil_date((now / 86_400) as i64 - days)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn language_tags_map_to_what_each_provider_accepts() {
        assert_eq!(brave_language("de-DE"), "de");
        assert_eq!(brave_language("zh-CN"), "zh-hans");
        assert_eq!(brave_language("zh_TW"), "zh-hant");
        assert_eq!(brave_language("pt-BR"), "pt-br");
        assert_eq!(brave_language("ja"), "jp");
        assert_eq!(google_language("zh-TW"), "lang_zh-TW");
        assert_eq!(google_language("zh"), "lang_zh-CN");
        assert_eq!(google_language("fr-CA"), "lang_fr");
    }

    #[test]
    fn snippets_lose_their_markup() {
        assert_eq!(plain("The <strong>Rust</strong> &amp; C&#39;s  book"), "The Rust & C's book");
        assert_eq!(plain("a < b and c"), "a < b and c");
    }

    #[test]
    fn ranges_start_in_the_past() {
        let day = since(TimeRange::Day);
        let year = since(TimeRange::Year);
        assert_eq!(day.len(), 10);
        assert!(year < day, "{year} < {day}");
        assert!(year.as_str() > "2020-01-01");
    }
}

fn snippet_of(text: &str, max: usize) -> String {
    let text = collapse(text);
    match text.char_indices().nth(max) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text,
    }
}

/// What happened at one provider.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Attempt {
    /// The provider.
    pub provider: &'static str,
    /// Whether the optional parameters were dropped.
    pub relaxed: bool,
    /// Results found.
    pub hits: usize,
    /// Why it failed, if it did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// The outcome of a search through the chain.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Outcome {
    /// The query as asked.
    pub query: String,
    /// The provider whose results these are.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub provider: Option<&'static str>,
    /// The results, all of them (the model reads at most [`MAX_RESULTS`]).
    pub results: Vec<Hit>,
    /// Every attempt, in order.
    pub attempts: Vec<Attempt>,
}

impl Outcome {
    /// Whether every provider failed (none answered, even with zero hits).
    pub fn all_failed(&self) -> bool {
        !self.attempts.is_empty() && self.attempts.iter().all(|a| a.error.is_some())
    }
}

/// Asks each provider in turn until one has results: a failure hands over to the next, zero hits
/// are retried once without the optional parameters, then hand over too.
pub async fn run_chain(providers: &[Box<dyn SearchProvider>], query: &SearchArgs) -> Outcome {
    let mut outcome =
        Outcome { query: query.query.clone(), provider: None, results: Vec::new(), attempts: Vec::new() };
    let relaxed = SearchArgs { query: query.query.clone(), ..SearchArgs::default() };
    for provider in providers {
        let mut tries = vec![(query, false)];
        if relaxed != *query {
            tries.push((&relaxed, true));
        }
        for (args, is_relaxed) in tries {
            let result = provider.search(args).await;
            let mut attempt =
                Attempt { provider: provider.name(), relaxed: is_relaxed, hits: 0, error: None };
            match result {
                Ok(hits) if !hits.is_empty() => {
                    attempt.hits = hits.len();
                    outcome.attempts.push(attempt);
                    outcome.provider = Some(provider.name());
                    outcome.results = dedupe(hits);
                    return outcome;
                }
                Ok(_) => outcome.attempts.push(attempt),
                Err(error) => {
                    tracing::warn!(provider = provider.name(), %error, "search provider failed");
                    attempt.error = Some(error.to_string());
                    outcome.attempts.push(attempt);
                    break;
                }
            }
        }
    }
    outcome
}

fn dedupe(hits: Vec<Hit>) -> Vec<Hit> {
    let mut seen = std::collections::HashSet::new();
    hits.into_iter().filter(|hit| seen.insert(hit.url.trim_end_matches('/').to_owned())).collect()
}

/// The results as the model reads them: compact XML, at most [`MAX_RESULTS`] items.
pub fn to_xml(outcome: &Outcome) -> String {
    let mut out = String::new();
    let shown = outcome.results.len().min(MAX_RESULTS);
    let _ = writeln!(
        out,
        "<searchResults query=\"{}\" provider=\"{}\" count=\"{shown}\">",
        escape(&outcome.query),
        outcome.provider.unwrap_or("")
    );
    for (i, hit) in outcome.results.iter().take(MAX_RESULTS).enumerate() {
        let _ = write!(
            out,
            "<item index=\"{}\" title=\"{}\" url=\"{}\"",
            i + 1,
            escape(&hit.title),
            escape(&hit.url)
        );
        if let Some(date) = &hit.published_date {
            let _ = write!(out, " publishedDate=\"{}\"", escape(date));
        }
        let _ = writeln!(out, ">{}</item>", escape(&hit.snippet));
    }
    out.push_str("</searchResults>");
    let failures: Vec<String> = outcome
        .attempts
        .iter()
        .filter_map(|a| a.error.as_ref().map(|e| format!("{} failed ({e})", a.provider)))
        .collect();
    if !failures.is_empty() {
        let _ = write!(
            out,
            "\nNote: {}; these results come from {}.",
            failures.join("; "),
            outcome.provider.unwrap_or("")
        );
    }
    out
}

fn escape(text: &str) -> String {
    tool_core::render::xml_escape(text)
}
