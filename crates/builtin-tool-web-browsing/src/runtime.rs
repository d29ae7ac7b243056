//! The runtime: the search chain and the crawlers, built once from [`WebSettings`].

use std::fmt::Write as _;
use std::sync::Arc;

use futures::StreamExt;
use futures::future::BoxFuture;
use safe_fetch::{Fetcher, Url};
use serde_json::{Value, json};
use tool_core::{CallContext, ErrorKind, MissingService, Services, ToolOutput, ToolRuntime, parse_arguments};

use crate::crawl::{self, Crawler, Direct, Failure, Page, Reader};
use crate::search::{self, HttpProvider, SearchProvider};
use crate::settings::WebSettings;
use crate::{CrawlMultiPagesArgs, CrawlSinglePageArgs, MAX_PAGES, PAGE_CHARS, SearchArgs, WebApi};

/// The smallest share of the character budget one page of a `crawlMultiPages` call gets.
const MIN_SHARE: usize = 2_500;

/// Runs the web-browsing APIs.
pub struct WebRuntime {
    parts: Result<Parts, String>,
}

struct Parts {
    providers: Vec<Box<dyn SearchProvider>>,
    crawlers: Vec<Box<dyn Crawler>>,
    page_fetcher: Fetcher,
    concurrency: usize,
}

impl std::fmt::Debug for WebRuntime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.parts {
            Ok(parts) => f
                .debug_struct("WebRuntime")
                .field("providers", &parts.providers.iter().map(|p| p.name()).collect::<Vec<_>>())
                .field("crawlers", &parts.crawlers.iter().map(|c| c.name()).collect::<Vec<_>>())
                .finish(),
            Err(e) => f.debug_struct("WebRuntime").field("unusable", e).finish(),
        }
    }
}

impl WebRuntime {
    /// Builds the providers and crawlers. Provider and reader endpoints are the operator's own
    /// configuration, so their hosts are reachable by the calls made to them (a SearXNG on the
    /// local network); pages a model names get only the settings' policy.
    pub fn new(settings: WebSettings) -> Self {
        Self { parts: Self::build(settings).map_err(|e| e.to_string()) }
    }

    /// A runtime whose every call fails with this reason (bad settings).
    pub fn unusable(reason: impl Into<String>) -> Self {
        Self { parts: Err(reason.into()) }
    }

    fn build(settings: WebSettings) -> Result<Parts, safe_fetch::FetchError> {
        let page_fetcher = Fetcher::new(settings.policy.clone(), settings.page_limits)?;
        let mut service_policy = settings.policy.clone();
        // Only bases the operator set are allowed (a SearXNG on the local network); the public
        // defaults need nothing, and allowing them would let a bad DNS answer for them through.
        let hosts = settings
            .providers
            .iter()
            .filter(|p| p.base != p.kind.default_base())
            .map(|p| p.base.as_str())
            .chain(
                settings.readers.iter().filter(|r| r.base != r.kind.default_base()).map(|r| r.base.as_str()),
            );
        for base in hosts {
            if let Some(host) = Url::parse(base).ok().and_then(|u| u.host_str().map(str::to_owned))
                && let Err(e) = service_policy.allow(host.trim_start_matches('[').trim_end_matches(']'))
            {
                tracing::warn!(endpoint = base, error = %e, "a configured endpoint's host cannot be allowed");
            }
        }
        let service_fetcher = Fetcher::new(service_policy, settings.provider_limits)?;
        let providers = settings
            .providers
            .into_iter()
            .map(|endpoint| {
                Box::new(HttpProvider::new(endpoint, service_fetcher.clone())) as Box<dyn SearchProvider>
            })
            .collect();
        let reader_fetcher = Fetcher::new(
            service_fetcher.policy().clone(),
            safe_fetch::Limits {
                total_time: settings.page_limits.total_time * 2,
                max_redirects: 0,
                ..settings.page_limits
            },
        )?;
        let mut crawlers: Vec<Box<dyn Crawler>> = vec![Box::new(Direct::new(page_fetcher.clone()))];
        crawlers.extend(
            settings
                .readers
                .into_iter()
                .map(|endpoint| Box::new(Reader::new(endpoint, reader_fetcher.clone())) as Box<dyn Crawler>),
        );
        Ok(Parts { providers, crawlers, page_fetcher, concurrency: settings.crawl_concurrency.max(1) })
    }
}

/// Builds the runtime from the front end's [`WebSettings`], or from the environment when it
/// provides none.
///
/// # Errors
///
/// None: bad settings make a runtime whose calls fail with the reason.
pub fn runtime(services: &Services) -> Result<Arc<dyn ToolRuntime>, MissingService> {
    let settings = match services.get::<WebSettings>() {
        Some(settings) => Ok(settings.clone()),
        None => WebSettings::from_env(),
    };
    Ok(Arc::new(match settings {
        Ok(settings) => WebRuntime::new(settings),
        Err(e) => {
            tracing::error!(error = %e, "web-browsing settings are invalid; its calls will fail");
            WebRuntime::unusable(format!("the web tool is misconfigured: {e}"))
        }
    }))
}

impl ToolRuntime for WebRuntime {
    fn execute<'a>(
        &'a self,
        api: &'a str,
        arguments: Value,
        context: &'a CallContext,
    ) -> BoxFuture<'a, ToolOutput> {
        Box::pin(async move {
            let Ok(api_kind) = api.parse::<WebApi>() else {
                return ToolOutput::error(ErrorKind::UnknownTool, format!("web-browsing has no api `{api}`"));
            };
            let parts = match &self.parts {
                Ok(parts) => parts,
                Err(reason) => return ToolOutput::error(ErrorKind::Execution, reason.clone()),
            };
            let work = async {
                match api_kind {
                    WebApi::Search => match parse_arguments(api, arguments) {
                        Ok(args) => parts.search(args).await,
                        Err(output) => output,
                    },
                    WebApi::CrawlSinglePage => match parse_arguments::<CrawlSinglePageArgs>(api, arguments) {
                        Ok(args) => parts.crawl_single(args).await,
                        Err(output) => output,
                    },
                    WebApi::CrawlMultiPages => match parse_arguments::<CrawlMultiPagesArgs>(api, arguments) {
                        Ok(args) => parts.crawl_multi(args).await,
                        Err(output) => output,
                    },
                }
            };
            tokio::select! {
                output = work => output,
                () = context.cancel.cancelled() => ToolOutput::error(ErrorKind::Cancelled, "the call was cancelled"),
            }
        })
    }
}

impl Parts {
    async fn search(&self, args: SearchArgs) -> ToolOutput {
        let query = args.query.trim();
        if query.is_empty() {
            return ToolOutput::error(ErrorKind::InvalidArguments, "the query is empty");
        }
        if query.chars().count() > 500 {
            return ToolOutput::error(
                ErrorKind::InvalidArguments,
                "the query is longer than 500 characters; shorten it to its key terms",
            );
        }
        if self.providers.is_empty() {
            return ToolOutput::error(
                ErrorKind::Execution,
                "no search provider is configured on this server (SEARXNG_URL, BRAVE_API_KEY, TAVILY_API_KEY, \
                 EXA_API_KEY, JINA_API_KEY, GOOGLE_PSE_API_KEY with GOOGLE_PSE_ENGINE_ID, KAGI_API_KEY or \
                 SEARCH1API_API_KEY); crawlSinglePage still reads pages whose URL you know",
            );
        }
        let args = SearchArgs { query: query.to_owned(), ..args };
        let outcome = search::run_chain(&self.providers, &args).await;
        let state = serde_json::to_value(&outcome).unwrap_or(Value::Null);
        if !outcome.results.is_empty() {
            return ToolOutput::ok(search::to_xml(&outcome)).with_state(state);
        }
        let mut tried: Vec<&str> = outcome.attempts.iter().map(|a| a.provider).collect();
        tried.dedup();
        if outcome.all_failed() {
            let reasons: Vec<String> = outcome
                .attempts
                .iter()
                .filter_map(|a| a.error.as_ref().map(|e| format!("{}: {e}", a.provider)))
                .collect();
            return ToolOutput::error(
                ErrorKind::Execution,
                format!(
                    "search failed at every provider ({}). This is not an empty result: do not repeat the same \
                     search now; answer from what you know and say that search is unavailable.",
                    reasons.join("; ")
                ),
            )
            .with_state(state);
        }
        let relaxed =
            if outcome.attempts.iter().any(|a| a.relaxed) { ", also without the filters" } else { "" };
        let failures: Vec<String> = outcome
            .attempts
            .iter()
            .filter_map(|a| a.error.as_ref().map(|e| format!("{} failed ({e})", a.provider)))
            .collect();
        let failed =
            if failures.is_empty() { String::new() } else { format!(" Note: {}.", failures.join("; ")) };
        ToolOutput::ok(format!(
            "No results for \"{query}\" (searched {}{relaxed}). Answer from what you know, or rewrite the query \
             with fewer or different words and search again.{failed}",
            tried.join(", ")
        ))
        .with_state(state)
    }

    /// The URL's own check before any crawler: a page the policy refuses is not handed to a
    /// reader service either.
    async fn admit(&self, url: &str) -> Result<Url, String> {
        self.page_fetcher.check(url).await.map_err(|e| e.to_string())?;
        Url::parse(url.trim()).map_err(|e| format!("`{url}` is not a valid URL: {e}"))
    }

    async fn read(&self, url: &str) -> Result<(Page, Vec<Failure>), String> {
        let parsed = self.admit(url).await?;
        crawl::crawl_page(&self.crawlers, &parsed).await.map_err(|failures| {
            let reasons: Vec<String> =
                failures.iter().map(|f| format!("{}: {}", f.crawler, f.reason)).collect();
            format!("{url} could not be read ({})", reasons.join("; "))
        })
    }

    async fn crawl_single(&self, args: CrawlSinglePageArgs) -> ToolOutput {
        let offset = args.offset.unwrap_or(0) as usize;
        match self.read(args.url.trim()).await {
            Err(reason) => ToolOutput::error(ErrorKind::Execution, reason),
            Ok((page, failures)) => match window(&page, offset, PAGE_CHARS) {
                Err(reason) => ToolOutput::error(ErrorKind::InvalidArguments, reason),
                Ok(shown) => {
                    let mut content = String::new();
                    render_page(&mut content, None, &page, &shown);
                    ToolOutput::ok(content)
                        .with_state(json!({ "pages": [page_state(&page, &shown, &failures)] }))
                }
            },
        }
    }

    async fn crawl_multi(&self, args: CrawlMultiPagesArgs) -> ToolOutput {
        let mut urls: Vec<String> = Vec::new();
        for url in args.urls.iter().map(|u| u.trim()) {
            if !url.is_empty() && !urls.iter().any(|u| u == url) {
                urls.push(url.to_owned());
            }
        }
        if urls.is_empty() || urls.len() > MAX_PAGES {
            return ToolOutput::error(
                ErrorKind::InvalidArguments,
                format!("give between 1 and {MAX_PAGES} distinct URLs (got {})", urls.len()),
            );
        }
        let share = (PAGE_CHARS / urls.len()).max(MIN_SHARE);
        type Read<'r> = BoxFuture<'r, Result<(Page, Vec<Failure>), String>>;
        let reads: Vec<Read<'_>> = urls.iter().map(|url| Box::pin(self.read(url)) as Read<'_>).collect();
        let results: Vec<Result<(Page, Vec<Failure>), String>> =
            futures::stream::iter(reads).buffered(self.concurrency).collect().await;
        let mut content = String::new();
        let mut pages = Vec::new();
        let mut errors = Vec::new();
        for (i, (url, result)) in urls.iter().zip(&results).enumerate() {
            match result {
                Ok((page, failures)) => {
                    let shown = window(page, 0, share).unwrap_or_default();
                    render_page(&mut content, Some(i + 1), page, &shown);
                    pages.push(page_state(page, &shown, failures));
                }
                Err(reason) => {
                    let _ = writeln!(
                        content,
                        "<page index=\"{}\" url=\"{}\" error=\"{}\"/>\n",
                        i + 1,
                        attr(url),
                        attr(reason)
                    );
                    errors.push(json!({ "url": url, "error": reason }));
                }
            }
        }
        let state = json!({ "pages": pages, "errors": errors });
        if pages.is_empty() {
            return ToolOutput::error(ErrorKind::Execution, content.trim_end().to_owned()).with_state(state);
        }
        ToolOutput::ok(content.trim_end().to_owned()).with_state(state)
    }
}

/// The part of a page shown in one call.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
struct Shown {
    text: String,
    start: usize,
    end: usize,
    total: usize,
}

fn window(page: &Page, offset: usize, limit: usize) -> Result<Shown, String> {
    let markdown = &page.content.markdown;
    let total = markdown.chars().count();
    if offset > 0 && offset >= total {
        return Err(format!("offset {offset} is past the end: the page has {total} characters"));
    }
    let byte_at = |chars: usize| markdown.char_indices().nth(chars).map_or(markdown.len(), |(i, _)| i);
    let end = (offset + limit).min(total);
    Ok(Shown { text: markdown[byte_at(offset)..byte_at(end)].to_owned(), start: offset, end, total })
}

fn render_page(out: &mut String, index: Option<usize>, page: &Page, shown: &Shown) {
    out.push_str("<page");
    if let Some(index) = index {
        let _ = write!(out, " index=\"{index}\"");
    }
    let _ = write!(out, " url=\"{}\"", attr(&page.final_url));
    if let Some(title) = &page.content.title {
        let _ = write!(out, " title=\"{}\"", attr(title));
    }
    if let Some(date) = &page.content.published_time {
        let _ = write!(out, " publishedTime=\"{}\"", attr(date));
    }
    let _ = writeln!(out, ">\n{}", shown.text);
    if shown.end < shown.total {
        let _ = writeln!(
            out,
            "\n[Showing characters {}–{} of {}. To read on, call crawlSinglePage with url=\"{}\" and offset={}.]",
            shown.start + 1,
            shown.end,
            shown.total,
            page.final_url,
            shown.end
        );
    }
    out.push_str("</page>\n\n");
}

fn page_state(page: &Page, shown: &Shown, failures: &[Failure]) -> Value {
    let mut state = serde_json::to_value(page).unwrap_or(Value::Null);
    state["markdown"] = json!(shown.text);
    state["offset"] = json!(shown.start);
    state["shownChars"] = json!(shown.end - shown.start);
    state["totalChars"] = json!(shown.total);
    if !failures.is_empty() {
        state["failures"] = json!(failures);
    }
    state
}

fn attr(text: &str) -> String {
    text.replace('&', "&amp;").replace('"', "&quot;").replace('<', "&lt;").replace('>', "&gt;")
}
