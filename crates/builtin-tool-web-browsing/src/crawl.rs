//! Crawling: a direct fetch through `safe-fetch` with extraction, then reader services.

use futures::future::BoxFuture;
use safe_fetch::{FetchError, Fetcher, Request, Url, header};
use serde::Serialize;
use serde_json::{Value, json};

use crate::MIN_PAGE_CHARS;
use crate::extract::{self, Extracted};
use crate::settings::{Endpoint, ReaderKind};

/// A page read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Page {
    /// The URL asked for.
    pub url: String,
    /// The URL that answered, after redirects.
    pub final_url: String,
    /// Who read it: `direct`, `jina`, `firecrawl`.
    pub crawler: &'static str,
    /// What was read: `html`, `text`, `pdf`, `markdown`.
    pub kind: &'static str,
    /// The main content and its metadata.
    #[serde(flatten)]
    pub content: Extracted,
}

/// Why a crawler did not read a page.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CrawlError {
    /// The reason, for the model and for the state.
    pub reason: String,
    /// No other crawler may try: the page led somewhere the policy refuses (a redirect to a
    /// private address), and a reader service would only follow it from its own network.
    pub refused: bool,
}

impl From<String> for CrawlError {
    fn from(reason: String) -> Self {
        Self { reason, refused: false }
    }
}

impl From<&str> for CrawlError {
    fn from(reason: &str) -> Self {
        Self { reason: reason.to_owned(), refused: false }
    }
}

fn fetch_error(error: FetchError) -> CrawlError {
    let refused = matches!(error, FetchError::Blocked { .. });
    CrawlError { reason: error.to_string(), refused }
}

/// A crawler: one way of reading a page.
pub trait Crawler: Send + Sync {
    /// Its name.
    fn name(&self) -> &'static str;
    /// Reads a page (its URL already admitted by the policy and normalised).
    fn crawl<'a>(&'a self, url: &'a Url) -> BoxFuture<'a, Result<Page, CrawlError>>;
}

/// Fetches the page itself and extracts its main content.
#[derive(Debug, Clone)]
pub struct Direct {
    fetcher: Fetcher,
}

impl Direct {
    /// A direct crawler over a fetcher.
    pub fn new(fetcher: Fetcher) -> Self {
        Self { fetcher }
    }
}

const ACCEPT: &str = "text/html,application/xhtml+xml,text/plain;q=0.9,application/pdf;q=0.8,*/*;q=0.5";

impl Crawler for Direct {
    fn name(&self) -> &'static str {
        "direct"
    }

    fn crawl<'a>(&'a self, url: &'a Url) -> BoxFuture<'a, Result<Page, CrawlError>> {
        Box::pin(async move {
            let request = Request::get(url.as_str())
                .truncate_at_cap()
                .header(header::ACCEPT, ACCEPT)
                .header(header::ACCEPT_LANGUAGE, "en;q=0.9, *;q=0.5");
            let response = self.fetcher.send(request).await.map_err(fetch_error)?;
            if !response.status.is_success() {
                return Err(format!("HTTP {}", response.status).into());
            }
            let media = response.media_type().unwrap_or_default();
            let body = &response.body;
            let sniff_html = || {
                let head = String::from_utf8_lossy(&body[..body.len().min(1024)]).to_ascii_lowercase();
                head.contains("<html") || head.contains("<!doctype html")
            };
            let final_url = response.url.to_string();
            let is_pdf = media == "application/pdf" || body.starts_with(b"%PDF-");
            if response.truncated && is_pdf {
                return Err(format!(
                    "the PDF is larger than {}, the most read; a cut PDF cannot be parsed",
                    size(body.len())
                )
                .into());
            }
            let (kind, mut content) = if is_pdf {
                let body = body.clone();
                let text = tokio::task::spawn_blocking(move || pdf_text(&body))
                    .await
                    .map_err(|_| CrawlError::from("the PDF could not be read (its parser failed)"))??;
                ("pdf", text)
            } else if media.contains("html")
                || media.contains("xml") && sniff_html()
                || (media.is_empty() && sniff_html())
            {
                let html = extract::decode(body, response.charset().as_deref(), true);
                let extracted = tokio::task::spawn_blocking({
                    let final_url = final_url.clone();
                    move || extract::extract_html(&html, Some(&final_url))
                })
                .await
                .map_err(|e| CrawlError::from(format!("extraction failed: {e}")))?;
                ("html", extracted)
            } else if media.starts_with("text/")
                || media.contains("json")
                || media.contains("xml")
                || media.is_empty()
            {
                let text = extract::decode(body, response.charset().as_deref(), false);
                (
                    "text",
                    Extracted { markdown: text.trim().to_owned(), method: "as is", ..Extracted::default() },
                )
            } else {
                return Err(format!("not a readable page ({media})").into());
            };
            if response.truncated {
                content.markdown.push_str(&format!(
                    "\n\n[The page is larger than {}; only its beginning was read.]",
                    size(body.len())
                ));
            }
            Ok(Page { url: url.to_string(), final_url, crawler: "direct", kind, content })
        })
    }
}

/// A byte count as people read it (`10 MiB`, `256 KiB`).
fn size(bytes: usize) -> String {
    if bytes >= 1024 * 1024 {
        format!("{} MiB", bytes / (1024 * 1024))
    } else {
        format!("{} KiB", bytes / 1024)
    }
}

fn pdf_text(body: &[u8]) -> Result<Extracted, String> {
    let text = crate::extract::pdf_text(body)?;
    Ok(Extracted { markdown: text, method: "pdf text", ..Extracted::default() })
}

/// A reader service: it fetches the page on its side and returns markdown.
#[derive(Debug, Clone)]
pub struct Reader {
    endpoint: Endpoint<ReaderKind>,
    fetcher: Fetcher,
}

impl Reader {
    /// A reader at its endpoint; `fetcher` must allow the endpoint's host.
    pub fn new(endpoint: Endpoint<ReaderKind>, fetcher: Fetcher) -> Self {
        Self { endpoint, fetcher }
    }
}

impl Crawler for Reader {
    fn name(&self) -> &'static str {
        self.endpoint.kind.name()
    }

    fn crawl<'a>(&'a self, url: &'a Url) -> BoxFuture<'a, Result<Page, CrawlError>> {
        Box::pin(async move {
            let base = &self.endpoint.base;
            let key = self.endpoint.key.as_ref().map(|k| format!("Bearer {}", k.0));
            // The page's URL travels in a body, never spliced into the service's own URL.
            let mut request = match self.endpoint.kind {
                ReaderKind::Jina => Request::post(
                    format!("{base}/"),
                    "application/json",
                    json!({"url": url.as_str()}).to_string(),
                )
                .header(header::HeaderName::from_static("x-return-format"), "markdown"),
                ReaderKind::Firecrawl => Request::post(
                    format!("{base}/v1/scrape"),
                    "application/json",
                    json!({"url": url.as_str(), "formats": ["markdown"], "onlyMainContent": true})
                        .to_string(),
                ),
            }
            .header(header::ACCEPT, "application/json");
            if let Some(key) = &key {
                request = request.header(header::AUTHORIZATION, key);
            }
            // A reader's own failure is not the page's: the next crawler may still try.
            let response = self.fetcher.send(request).await.map_err(|e| CrawlError::from(e.to_string()))?;
            let body: Value = serde_json::from_slice(&response.body)
                .map_err(|_| CrawlError::from(format!("HTTP {}: the answer is not JSON", response.status)))?;
            if !response.status.is_success() || body.get("success") == Some(&Value::Bool(false)) {
                let message = ["/error", "/message", "/readableMessage"]
                    .iter()
                    .find_map(|p| body.pointer(p).and_then(Value::as_str))
                    .unwrap_or("no message");
                return Err(format!("HTTP {}: {message}", response.status).into());
            }
            let data = &body["data"];
            let text = |pointers: &[&str]| {
                pointers.iter().find_map(|p| data.pointer(p).and_then(Value::as_str)).map(str::to_owned)
            };
            let markdown = text(&["/content", "/markdown"]).unwrap_or_default();
            let title = text(&["/title", "/metadata/title"]).filter(|t| !t.is_empty());
            Ok(Page {
                url: url.to_string(),
                final_url: text(&["/url", "/metadata/url", "/metadata/sourceURL"])
                    .unwrap_or_else(|| url.to_string()),
                crawler: self.name(),
                kind: "markdown",
                content: Extracted {
                    title,
                    markdown: markdown.trim().to_owned(),
                    published_time: text(&["/publishedTime", "/metadata/publishedTime"]),
                    method: "reader service",
                    ..Extracted::default()
                },
            })
        })
    }
}

/// One crawler's failure on a page.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Failure {
    /// The crawler.
    pub crawler: &'static str,
    /// Why.
    pub reason: String,
}

/// Tries each crawler in turn; a page counts only with more than [`MIN_PAGE_CHARS`] characters
/// of text and when it is not an interstitial. A refusal by the policy ends the chain.
pub async fn crawl_page(
    crawlers: &[Box<dyn Crawler>],
    url: &Url,
) -> Result<(Page, Vec<Failure>), Vec<Failure>> {
    let mut failures = Vec::new();
    for crawler in crawlers {
        let reason = match crawler.crawl(url).await {
            Ok(page) => {
                let chars = page.content.markdown.chars().filter(|c| !c.is_whitespace()).count();
                if let Some(sign) =
                    extract::interstitial(page.content.title.as_deref(), &page.content.markdown)
                {
                    format!("an interstitial page (\"{sign}\"), not the content")
                } else if chars <= MIN_PAGE_CHARS {
                    format!("only {chars} characters of text")
                } else {
                    return Ok((page, failures));
                }
            }
            Err(CrawlError { reason, refused }) => {
                failures.push(Failure { crawler: crawler.name(), reason });
                if refused {
                    return Err(failures);
                }
                continue;
            }
        };
        failures.push(Failure { crawler: crawler.name(), reason });
    }
    Err(failures)
}
