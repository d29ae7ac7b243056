//! The web-browsing tool: search through a chain of providers, and pages crawled into readable
//! markdown.
//!
//! Four parts, like every builtin tool: [`manifest()`], [`SYSTEM_ROLE`], `runtime(&Services)`
//! (feature `runtime`) and `RENDER` (feature `render`).
//!
//! * `search` asks every configured provider in turn ([`settings::WebSettings`]: SearXNG, Brave,
//!   Tavily, Exa, Jina, Google Programmable Search, Kagi, Search1API): a provider that fails
//!   hands over to the next and its reason is reported; zero hits are retried once with the
//!   optional parameters dropped. The model reads compact XML (at most 30 items, indexed for
//!   citation); people get the whole response as state.
//! * `crawlSinglePage` and `crawlMultiPages` fetch through `safe-fetch` (no private addresses,
//!   capped bodies), extract the main content (`dom_smoothie`, then `htmd` to markdown), and
//!   fall back to configured reader services. Pages are cut at 25 000 characters with a notice
//!   naming the `offset` that reads on.
//!
//! ```
//! let manifest = builtin_tool_web_browsing::manifest();
//! let names: Vec<&str> = manifest.apis.iter().map(|a| a.name.as_str()).collect();
//! assert_eq!(names, ["search", "crawlSinglePage", "crawlMultiPages"]);
//! ```
#![deny(missing_docs)]

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use tool_core::{ApiSpec, Intervention, Tier, ToolManifest, ToolMeta};

#[cfg(feature = "runtime")]
pub mod crawl;
#[cfg(feature = "runtime")]
pub mod extract;
#[cfg(feature = "runtime")]
pub mod search;
#[cfg(feature = "runtime")]
pub mod settings;

/// The tool's identifier.
pub const IDENTIFIER: &str = "web-browsing";

/// The system-role template (`{{date}}` is filled in when it is rendered).
pub const SYSTEM_ROLE: &str = include_str!("system_role.md");

/// The most search results the model reads.
pub const MAX_RESULTS: usize = 30;

/// The most characters of one page the model reads per call.
pub const PAGE_CHARS: usize = 25_000;

/// The most URLs one `crawlMultiPages` call takes.
pub const MAX_PAGES: usize = 10;

/// A page counts only with more text than this.
pub const MIN_PAGE_CHARS: usize = 100;

tool_core::api_enum! {
    /// The APIs of the web-browsing tool.
    pub enum WebApi {
        /// Search the web.
        Search = "search",
        /// Read one page.
        CrawlSinglePage = "crawlSinglePage",
        /// Read several pages at once.
        CrawlMultiPages = "crawlMultiPages",
    }
}

/// A search category (SearXNG's; other providers map what they can).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Category {
    /// The general web.
    General,
    /// News articles.
    News,
    /// Scientific publications.
    Science,
    /// Software and IT.
    It,
    /// Videos.
    Videos,
}

impl Category {
    /// The name providers use.
    pub fn as_str(self) -> &'static str {
        match self {
            Category::General => "general",
            Category::News => "news",
            Category::Science => "science",
            Category::It => "it",
            Category::Videos => "videos",
        }
    }
}

/// How recent results must be.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum TimeRange {
    /// The last day.
    Day,
    /// The last week.
    Week,
    /// The last month.
    Month,
    /// The last year.
    Year,
}

impl TimeRange {
    /// The name providers use.
    pub fn as_str(self) -> &'static str {
        match self {
            TimeRange::Day => "day",
            TimeRange::Week => "week",
            TimeRange::Month => "month",
            TimeRange::Year => "year",
        }
    }
}

/// Arguments of `search`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct SearchArgs {
    /// The query: keywords, not a question; put the most distinctive terms first.
    pub query: String,
    /// Restrict to these categories (default: general).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub categories: Option<Vec<Category>>,
    /// Only results from this recent period.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_range: Option<TimeRange>,
    /// Search engines to ask, by name (SearXNG engines such as `google`, `bing`, `wikipedia`,
    /// `github`, `arxiv`); providers without engines ignore it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub engines: Option<Vec<String>>,
    /// Language and region of results, as a BCP 47 tag (`en`, `de-DE`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub locale: Option<String>,
}

/// Arguments of `crawlSinglePage`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CrawlSinglePageArgs {
    /// The page's http or https URL.
    pub url: String,
    /// The character to start from, to read on after a cut page (the notice says which).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub offset: Option<u32>,
}

/// Arguments of `crawlMultiPages`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CrawlMultiPagesArgs {
    /// The pages' URLs, at most 10; they are read in parallel.
    pub urls: Vec<String>,
}

/// The variables that configure each search provider (all of a row must be set).
pub const PROVIDER_VARIABLES: [&[&str]; 8] = [
    &["SEARXNG_URL"],
    &["BRAVE_API_KEY"],
    &["TAVILY_API_KEY"],
    &["EXA_API_KEY"],
    &["JINA_API_KEY"],
    &["GOOGLE_PSE_API_KEY", "GOOGLE_PSE_ENGINE_ID"],
    &["KAGI_API_KEY"],
    &["SEARCH1API_API_KEY"],
];

/// Whether the environment configures a search provider: the tool is on by default only then
/// (crawling works without one, for a front end that turns the tool on).
pub fn search_configured_in_env() -> bool {
    PROVIDER_VARIABLES
        .iter()
        .any(|row| row.iter().all(|v| std::env::var(v).is_ok_and(|value| !value.trim().is_empty())))
}

/// The tool's manifest.
pub fn manifest() -> ToolManifest {
    ToolManifest::new(
        IDENTIFIER,
        ToolMeta::new(
            "Web browsing",
            "Search the web and read pages as clean markdown, with sources to cite",
        )
        .icon("🌐"),
    )
    .intervention(Intervention::Never.into())
    .system_role(SYSTEM_ROLE)
    .api(
        ApiSpec::new::<SearchArgs>(
            WebApi::Search.name(),
            "Search the web. Returns up to 30 results as <item index title url publishedDate>snippet</item>; \
             cite them by index. Read a result's page with crawlSinglePage before relying on details.",
        )
        .tier(Tier::Read)
        .open_world()
        .timeout_ms(45_000),
    )
    .api(
        ApiSpec::new::<CrawlSinglePageArgs>(
            WebApi::CrawlSinglePage.name(),
            "Read one web page (HTML, plain text or PDF) as markdown of its main content, with its title \
             and final URL. Long pages are cut at 25 000 characters; the notice gives the offset to read on.",
        )
        .tier(Tier::Read)
        .open_world()
        .timeout_ms(60_000),
    )
    .api(
        ApiSpec::new::<CrawlMultiPagesArgs>(
            WebApi::CrawlMultiPages.name(),
            "Read up to 10 web pages in parallel; each comes back like crawlSinglePage's, sharing the \
             25 000-character budget.",
        )
        .tier(Tier::Read)
        .open_world()
        .timeout_ms(90_000),
    )
}

#[cfg(feature = "runtime")]
mod runtime;

#[cfg(feature = "runtime")]
pub use runtime::{WebRuntime, runtime};

#[cfg(feature = "render")]
mod render;

#[cfg(feature = "render")]
pub use render::WebRender;

/// The render hooks, as the registry's table holds them.
#[cfg(feature = "render")]
pub static RENDER: WebRender = WebRender;
