//! Which search providers and reader services are configured, from environment variables.
//!
//! | provider | variables (base URL override in parentheses) |
//! |---|---|
//! | SearXNG | `SEARXNG_URL` (the instance, e.g. `http://searxng:8080`; JSON output must be on) |
//! | Brave | `BRAVE_API_KEY` (`BRAVE_BASE_URL`) |
//! | Tavily | `TAVILY_API_KEY` (`TAVILY_BASE_URL`) |
//! | Exa | `EXA_API_KEY` (`EXA_BASE_URL`) |
//! | Jina | `JINA_API_KEY` (`JINA_SEARCH_URL`) |
//! | Google Programmable Search | `GOOGLE_PSE_API_KEY` and `GOOGLE_PSE_ENGINE_ID` (`GOOGLE_PSE_BASE_URL`) |
//! | Kagi | `KAGI_API_KEY` (`KAGI_BASE_URL`) |
//! | Search1API | `SEARCH1API_API_KEY` (`SEARCH1API_BASE_URL`) |
//!
//! Every configured provider joins the chain, in the order above or in the order of
//! `SEARCH_PROVIDERS` (`brave,searxng`). Crawling needs no configuration: pages are fetched
//! directly; `CRAWLERS` (`direct,jina,firecrawl`) adds reader services as fallbacks — Jina's
//! reader (`JINA_READER_URL`, with `JINA_API_KEY` when set) and Firecrawl (`FIRECRAWL_API_KEY`,
//! `FIRECRAWL_BASE_URL`); a reader fetches from its own network position, outside the fetch
//! policy, so only the readers `CRAWLERS` names are used. `TOOLHOST_FETCH_ALLOW` lists the hosts, addresses and networks a crawl
//! may reach although they are not public (comma-separated; empty by default).

use std::fmt;

use safe_fetch::{AllowList, BadAllowEntry, Limits, Policy};

/// A search provider.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ProviderKind {
    /// A SearXNG instance's JSON API.
    Searxng,
    /// Brave Search API.
    Brave,
    /// Tavily.
    Tavily,
    /// Exa.
    Exa,
    /// Jina search (`s.jina.ai`).
    Jina,
    /// Google Programmable Search (Custom Search JSON API).
    Google,
    /// Kagi Search API.
    Kagi,
    /// Search1API.
    Search1api,
}

impl ProviderKind {
    /// Every provider, in the default chain order.
    pub const ALL: [ProviderKind; 8] = [
        ProviderKind::Searxng,
        ProviderKind::Brave,
        ProviderKind::Tavily,
        ProviderKind::Exa,
        ProviderKind::Jina,
        ProviderKind::Google,
        ProviderKind::Kagi,
        ProviderKind::Search1api,
    ];

    /// Its name in settings and results.
    pub fn name(self) -> &'static str {
        match self {
            ProviderKind::Searxng => "searxng",
            ProviderKind::Brave => "brave",
            ProviderKind::Tavily => "tavily",
            ProviderKind::Exa => "exa",
            ProviderKind::Jina => "jina",
            ProviderKind::Google => "google",
            ProviderKind::Kagi => "kagi",
            ProviderKind::Search1api => "search1api",
        }
    }

    /// The variable holding its key (SearXNG: its URL).
    pub fn key_variable(self) -> &'static str {
        match self {
            ProviderKind::Searxng => "SEARXNG_URL",
            ProviderKind::Brave => "BRAVE_API_KEY",
            ProviderKind::Tavily => "TAVILY_API_KEY",
            ProviderKind::Exa => "EXA_API_KEY",
            ProviderKind::Jina => "JINA_API_KEY",
            ProviderKind::Google => "GOOGLE_PSE_API_KEY",
            ProviderKind::Kagi => "KAGI_API_KEY",
            ProviderKind::Search1api => "SEARCH1API_API_KEY",
        }
    }

    fn base_variable(self) -> &'static str {
        match self {
            ProviderKind::Searxng => "SEARXNG_URL",
            ProviderKind::Brave => "BRAVE_BASE_URL",
            ProviderKind::Tavily => "TAVILY_BASE_URL",
            ProviderKind::Exa => "EXA_BASE_URL",
            ProviderKind::Jina => "JINA_SEARCH_URL",
            ProviderKind::Google => "GOOGLE_PSE_BASE_URL",
            ProviderKind::Kagi => "KAGI_BASE_URL",
            ProviderKind::Search1api => "SEARCH1API_BASE_URL",
        }
    }

    /// Its public endpoint, used unless the base variable overrides it.
    pub fn default_base(self) -> &'static str {
        match self {
            ProviderKind::Searxng => "",
            ProviderKind::Brave => "https://api.search.brave.com",
            ProviderKind::Tavily => "https://api.tavily.com",
            ProviderKind::Exa => "https://api.exa.ai",
            ProviderKind::Jina => "https://s.jina.ai",
            ProviderKind::Google => "https://www.googleapis.com",
            ProviderKind::Kagi => "https://kagi.com",
            ProviderKind::Search1api => "https://api.search1api.com",
        }
    }
}

/// A secret that is never printed.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(pub String);

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(…)")
    }
}

/// One configured endpoint: a search provider or a reader service.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint<K> {
    /// Which service.
    pub kind: K,
    /// Its base URL, without a trailing slash.
    pub base: String,
    /// Its key, when it takes one.
    pub key: Option<Secret>,
    /// Google's engine id (`cx`).
    pub engine_id: Option<String>,
}

impl<K> Endpoint<K> {
    /// An endpoint at `base` with an optional key.
    pub fn new(kind: K, base: impl Into<String>, key: Option<&str>) -> Self {
        let base = base.into().trim_end_matches('/').to_owned();
        Self { kind, base, key: key.map(|k| Secret(k.to_owned())), engine_id: None }
    }
}

/// A reader service crawls a page on its side and returns markdown.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ReaderKind {
    /// Jina's reader (`r.jina.ai`).
    Jina,
    /// Firecrawl's scrape API.
    Firecrawl,
}

impl ReaderKind {
    /// Its public endpoint, used unless the base variable overrides it.
    pub fn default_base(self) -> &'static str {
        match self {
            ReaderKind::Jina => "https://r.jina.ai",
            ReaderKind::Firecrawl => "https://api.firecrawl.dev",
        }
    }

    /// Its name in settings and results.
    pub fn name(self) -> &'static str {
        match self {
            ReaderKind::Jina => "jina",
            ReaderKind::Firecrawl => "firecrawl",
        }
    }
}

/// What the tool may use.
#[derive(Debug, Clone)]
pub struct WebSettings {
    /// The search chain, in order.
    pub providers: Vec<Endpoint<ProviderKind>>,
    /// Reader services tried after the direct fetch, in order.
    pub readers: Vec<Endpoint<ReaderKind>>,
    /// Where crawls may go.
    pub policy: Policy,
    /// Caps on one page fetch.
    pub page_limits: Limits,
    /// Caps on one provider call.
    pub provider_limits: Limits,
    /// Pages fetched at once by `crawlMultiPages`.
    pub crawl_concurrency: usize,
}

impl Default for WebSettings {
    fn default() -> Self {
        Self {
            providers: Vec::new(),
            readers: Vec::new(),
            policy: Policy::default().with_hint(ALLOW_HINT),
            page_limits: Limits { total_time: std::time::Duration::from_secs(20), ..Limits::default() },
            // Provider and reader calls are API calls: an answer that redirects is refused, so an
            // endpoint cannot send the server to another (allowed) host or port.
            provider_limits: Limits {
                max_body_bytes: 4 * 1024 * 1024,
                total_time: std::time::Duration::from_secs(15),
                max_redirects: 0,
                ..Limits::default()
            },
            crawl_concurrency: 4,
        }
    }
}

/// Where an operator allows more, as refusals name it.
pub const ALLOW_HINT: &str = "TOOLHOST_FETCH_ALLOW in the server's environment";

/// A setting that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SettingsError {
    /// `SEARCH_PROVIDERS` or `CRAWLERS` names something unknown.
    #[error("{variable} names `{name}`, which is not one of: {known}")]
    Unknown {
        /// The variable.
        variable: &'static str,
        /// The name.
        name: String,
        /// What it may name.
        known: String,
    },
    /// A provider in `SEARCH_PROVIDERS` has no key.
    #[error("SEARCH_PROVIDERS names `{provider}` but {variable} is not set")]
    NotConfigured {
        /// The provider.
        provider: &'static str,
        /// Its variable.
        variable: &'static str,
    },
    /// A bad `TOOLHOST_FETCH_ALLOW` entry.
    #[error("TOOLHOST_FETCH_ALLOW: {0}")]
    Allow(#[from] BadAllowEntry),
}

impl WebSettings {
    /// Settings from the process environment.
    ///
    /// # Errors
    ///
    /// See [`SettingsError`].
    pub fn from_env() -> Result<Self, SettingsError> {
        Self::from_vars(|name| std::env::var(name).ok())
    }

    /// Settings from a variable lookup (empty values count as unset).
    ///
    /// # Errors
    ///
    /// See [`SettingsError`].
    pub fn from_vars(get: impl Fn(&str) -> Option<String>) -> Result<Self, SettingsError> {
        let get = |name: &str| get(name).map(|v| v.trim().to_owned()).filter(|v| !v.is_empty());
        let mut settings = WebSettings::default();
        let configured = |kind: ProviderKind| -> Option<Endpoint<ProviderKind>> {
            let key = get(kind.key_variable())?;
            let base = get(kind.base_variable()).unwrap_or_else(|| kind.default_base().to_owned());
            let mut endpoint = match kind {
                ProviderKind::Searxng => Endpoint::new(kind, key, None),
                _ => Endpoint::new(kind, base, Some(&key)),
            };
            if kind == ProviderKind::Google {
                endpoint.engine_id = Some(get("GOOGLE_PSE_ENGINE_ID")?);
            }
            Some(endpoint)
        };
        match get("SEARCH_PROVIDERS") {
            Some(order) => {
                for name in order.split(',').map(str::trim).filter(|n| !n.is_empty()) {
                    let kind = ProviderKind::ALL.into_iter().find(|k| k.name() == name).ok_or_else(|| {
                        SettingsError::Unknown {
                            variable: "SEARCH_PROVIDERS",
                            name: name.to_owned(),
                            known: ProviderKind::ALL.map(ProviderKind::name).join(", "),
                        }
                    })?;
                    let endpoint = configured(kind).ok_or(SettingsError::NotConfigured {
                        provider: kind.name(),
                        variable: kind.key_variable(),
                    })?;
                    settings.providers.push(endpoint);
                }
            }
            None => settings.providers = ProviderKind::ALL.into_iter().filter_map(configured).collect(),
        }
        let jina_reader = || {
            let base = get("JINA_READER_URL").unwrap_or_else(|| ReaderKind::Jina.default_base().to_owned());
            Endpoint::new(ReaderKind::Jina, base, get("JINA_API_KEY").as_deref())
        };
        let firecrawl = || {
            get("FIRECRAWL_API_KEY").map(|key| {
                let base = get("FIRECRAWL_BASE_URL")
                    .unwrap_or_else(|| ReaderKind::Firecrawl.default_base().to_owned());
                Endpoint::new(ReaderKind::Firecrawl, base, Some(&key))
            })
        };
        // Readers fetch from their own network position, outside the fetch policy: only those
        // `CRAWLERS` names are used.
        if let Some(order) = get("CRAWLERS") {
            for name in order.split(',').map(str::trim).filter(|n| !n.is_empty()) {
                match name {
                    "direct" => {}
                    "jina" => settings.readers.push(jina_reader()),
                    "firecrawl" => {
                        settings.readers.push(firecrawl().ok_or(SettingsError::NotConfigured {
                            provider: "firecrawl",
                            variable: "FIRECRAWL_API_KEY",
                        })?)
                    }
                    other => {
                        return Err(SettingsError::Unknown {
                            variable: "CRAWLERS",
                            name: other.to_owned(),
                            known: "direct, jina, firecrawl".into(),
                        });
                    }
                }
            }
        }
        if let Some(allow) = get("TOOLHOST_FETCH_ALLOW") {
            settings.policy = Policy::new(AllowList::parse(allow.split(','))?).with_hint(ALLOW_HINT);
        }
        Ok(settings)
    }

    /// Whether any search provider is configured (the tool is on by default only then).
    pub fn search_configured(&self) -> bool {
        !self.providers.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn settings(vars: &[(&str, &str)]) -> Result<WebSettings, SettingsError> {
        let vars: HashMap<String, String> =
            vars.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
        WebSettings::from_vars(|name| vars.get(name).cloned())
    }

    #[test]
    fn configured_providers_form_the_chain_in_order() {
        let s = settings(&[
            ("BRAVE_API_KEY", "b"),
            ("SEARXNG_URL", "http://searxng:8080/"),
            ("KAGI_API_KEY", " "),
        ])
        .unwrap();
        let names: Vec<&str> = s.providers.iter().map(|p| p.kind.name()).collect();
        assert_eq!(names, ["searxng", "brave"]);
        assert_eq!(s.providers[0].base, "http://searxng:8080");
        assert_eq!(s.providers[1].base, "https://api.search.brave.com");
        assert!(!format!("{s:?}").contains("\"b\""), "keys are not printed");
        assert!(s.readers.is_empty());
        assert!(!settings(&[]).unwrap().search_configured());

        let s = settings(&[
            ("BRAVE_API_KEY", "b"),
            ("SEARXNG_URL", "http://s"),
            ("SEARCH_PROVIDERS", "brave, searxng"),
        ])
        .unwrap();
        assert_eq!(s.providers.iter().map(|p| p.kind.name()).collect::<Vec<_>>(), ["brave", "searxng"]);
        let google_without_cx = settings(&[("GOOGLE_PSE_API_KEY", "g")]).unwrap();
        assert!(!google_without_cx.search_configured(), "Google needs its engine id too");
    }

    #[test]
    fn the_default_on_check_knows_every_provider() {
        for kind in ProviderKind::ALL {
            assert!(crate::PROVIDER_VARIABLES.iter().any(|row| row[0] == kind.key_variable()), "{kind:?}");
        }
    }

    #[test]
    fn bad_settings_say_what_is_wrong() {
        let e = settings(&[("SEARCH_PROVIDERS", "bing")]).unwrap_err().to_string();
        assert!(e.contains("`bing`") && e.contains("searxng, brave"), "{e}");
        let e = settings(&[("SEARCH_PROVIDERS", "tavily")]).unwrap_err().to_string();
        assert_eq!(e, "SEARCH_PROVIDERS names `tavily` but TAVILY_API_KEY is not set");
        let e = settings(&[("CRAWLERS", "direct,firecrawl")]).unwrap_err().to_string();
        assert!(e.contains("FIRECRAWL_API_KEY"), "{e}");
        assert!(settings(&[("TOOLHOST_FETCH_ALLOW", "10.0.0.0/99")]).is_err());
        let s =
            settings(&[("CRAWLERS", "direct,jina"), ("TOOLHOST_FETCH_ALLOW", "10.0.0.0/8,wiki.internal")])
                .unwrap();
        assert_eq!(s.readers[0].kind, ReaderKind::Jina);
        assert!(s.policy.allow_list().allows_host("wiki.internal"));
    }
}
