//! HTTP that cannot be turned against the machine it runs on.
//!
//! A model chooses the URLs a web tool fetches, so every request is a request the server makes on
//! a stranger's behalf. [`Fetcher`] makes sure none of them reaches what only the server can
//! reach (loopback services, the private network, a cloud metadata endpoint):
//!
//! * [`Policy`] is the decision, a pure function: `http`/`https` only, no credentials in URLs,
//!   IP-literal hosts judged before any connection (every spelling the URL parser accepts, and
//!   the IPv4 address inside mapped, compatible, NAT64 and 6to4 IPv6 forms), every reserved range
//!   refused unless an operator's [`AllowList`] names it; metadata endpoints only when named
//!   exactly.
//! * Names are resolved once, by a resolver that hands the connector only the addresses that
//!   passed: the connection is pinned to what was checked, so a name that answers differently the
//!   second time (DNS rebinding) gains nothing.
//! * No proxies; redirects followed by hand, each hop checked like the first, at most
//!   [`Limits::max_redirects`]; credentials-bearing headers dropped when a redirect changes origin.
//! * The body is capped after decompression (a gzip bomb stops at [`Limits::max_body_bytes`]) and
//!   the whole exchange, redirects included, at [`Limits::total_time`].
//!
//! Refusals say what was blocked and why, and where an operator would allow it.
//!
//! ```
//! use safe_fetch::{Blocked, Policy};
//!
//! let policy = Policy::default();
//! let url = url::Url::parse("http://2130706433/").unwrap();
//! let refusal = policy.check_url(&url).unwrap_err();
//! assert!(matches!(refusal, Blocked::Address { .. }));
//! assert!(refusal.to_string().starts_with("127.0.0.1 is a loopback address"));
//! ```
#![deny(missing_docs)]

pub mod policy;

use std::error::Error as StdError;
use std::fmt;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use futures::future::BoxFuture;
use reqwest::Method;
use reqwest::dns::{Name, Resolve, Resolving};
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};

pub use policy::{AllowList, BadAllowEntry, Blocked, Policy, Range, Target, classify};
pub use reqwest::StatusCode;
pub use reqwest::header;
pub use url::Url;

/// Resolves host names to addresses; the system resolver by default, a scripted one in tests.
pub trait Lookup: Send + Sync + 'static {
    /// The addresses of `host`.
    fn lookup(&self, host: &str) -> BoxFuture<'static, io::Result<Vec<IpAddr>>>;
}

/// The operating system's resolver (`getaddrinfo`).
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemLookup;

impl Lookup for SystemLookup {
    fn lookup(&self, host: &str) -> BoxFuture<'static, io::Result<Vec<IpAddr>>> {
        let host = host.to_owned();
        Box::pin(async move {
            let addresses = tokio::net::lookup_host((host.as_str(), 0)).await?;
            Ok(addresses.map(|a| a.ip()).collect())
        })
    }
}

/// Caps on one fetch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// The most body bytes read, counted after decompression.
    pub max_body_bytes: usize,
    /// The whole exchange: resolution, connections, redirects and the body.
    pub total_time: Duration,
    /// One connection attempt.
    pub connect_time: Duration,
    /// Redirects followed before giving up.
    pub max_redirects: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_body_bytes: 10 * 1024 * 1024,
            total_time: Duration::from_secs(30),
            connect_time: Duration::from_secs(10),
            max_redirects: 5,
        }
    }
}

/// Why a fetch did not produce a response.
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    /// The URL does not parse.
    #[error("`{url}` is not a valid URL: {reason}")]
    InvalidUrl {
        /// The text given.
        url: String,
        /// The parser's complaint.
        reason: String,
    },
    /// The policy refused the URL or every address of its host.
    #[error("{url} was not fetched: {blocked}")]
    Blocked {
        /// The URL refused (a redirect's target when a hop was refused).
        url: String,
        /// Why.
        blocked: Blocked,
    },
    /// The whole exchange took longer than allowed.
    #[error("{url} did not finish within {} s", after.as_secs_f32())]
    Timeout {
        /// The URL being fetched.
        url: String,
        /// The limit.
        after: Duration,
    },
    /// The body passed the cap.
    #[error("{url} sent more than {limit} bytes (after decompression); the fetch stopped there")]
    TooLarge {
        /// The URL.
        url: String,
        /// The cap.
        limit: usize,
    },
    /// Too many redirects.
    #[error("{url} redirected more than {limit} times")]
    TooManyRedirects {
        /// The first URL.
        url: String,
        /// The limit.
        limit: usize,
    },
    /// A redirect whose target is missing or not a URL.
    #[error("{url} answered {status} with an unusable Location header")]
    BadRedirect {
        /// The URL that redirected.
        url: String,
        /// Its status.
        status: u16,
    },
    /// The connection or the exchange failed.
    #[error("{url}: {reason}")]
    Transport {
        /// The URL.
        url: String,
        /// The error chain, outermost first.
        reason: String,
    },
    /// The HTTP client could not be built (no TLS roots…).
    #[error("the HTTP client could not be built: {0}")]
    Client(String),
}

/// A request to send.
#[derive(Debug, Clone)]
pub struct Request {
    method: Method,
    url: String,
    headers: HeaderMap,
    body: Option<Bytes>,
    truncate: bool,
}

impl Request {
    /// A GET request.
    pub fn get(url: impl Into<String>) -> Self {
        Self { method: Method::GET, url: url.into(), headers: HeaderMap::new(), body: None, truncate: false }
    }

    /// A POST request with a body of the given content type.
    pub fn post(url: impl Into<String>, content_type: &'static str, body: impl Into<Bytes>) -> Self {
        let mut request = Self::get(url);
        request.method = Method::POST;
        request.headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
        request.body = Some(body.into());
        request
    }

    /// A request of another method (`PUT`, `DELETE`, `PATCH`, `HEAD`…), without a body; `None` for
    /// a method name that is not a token.
    pub fn method(method: &str, url: impl Into<String>) -> Option<Self> {
        let mut request = Self::get(url);
        request.method = Method::from_bytes(method.as_bytes()).ok()?;
        Some(request)
    }

    /// Sets the body and its content type (an invalid content type is dropped with a warning).
    #[must_use]
    pub fn body(mut self, content_type: &str, body: impl Into<Bytes>) -> Self {
        match HeaderValue::from_str(content_type) {
            Ok(value) => {
                self.headers.insert(header::CONTENT_TYPE, value);
            }
            Err(_) => tracing::warn!("content type with invalid characters dropped"),
        }
        self.body = Some(body.into());
        self
    }

    /// Adds a header; a value that is not a valid header value is dropped with a warning.
    #[must_use]
    pub fn header(mut self, name: HeaderName, value: &str) -> Self {
        match HeaderValue::from_str(value) {
            Ok(mut value) => {
                if matches!(name, header::AUTHORIZATION)
                    || name.as_str().contains("key")
                    || name.as_str().contains("token")
                {
                    value.set_sensitive(true);
                }
                self.headers.insert(name, value);
            }
            Err(_) => tracing::warn!(header = %name, "header value with invalid characters dropped"),
        }
        self
    }

    /// A body past [`Limits::max_body_bytes`] is kept up to the cap (the response says it was cut)
    /// instead of failing the fetch: for a page, whose first megabytes are worth reading. The
    /// connection stops reading at the cap either way.
    #[must_use]
    pub fn truncate_at_cap(mut self) -> Self {
        self.truncate = true;
        self
    }

    /// The URL as given.
    pub fn url(&self) -> &str {
        &self.url
    }
}

/// A response, read whole within the caps.
#[derive(Debug, Clone)]
pub struct Response {
    /// The status of the last hop.
    pub status: StatusCode,
    /// The URL that answered, after redirects.
    pub url: Url,
    /// The URLs that redirected, in order.
    pub redirects: Vec<Url>,
    /// The last hop's headers.
    pub headers: HeaderMap,
    /// The body, decompressed.
    pub body: Bytes,
    /// The body was cut at the cap ([`Request::truncate_at_cap`]).
    pub truncated: bool,
}

impl Response {
    /// The `Content-Type` header's media type, lower-cased, without parameters.
    pub fn media_type(&self) -> Option<String> {
        let value = self.headers.get(header::CONTENT_TYPE)?.to_str().ok()?;
        Some(value.split(';').next().unwrap_or("").trim().to_ascii_lowercase())
    }

    /// The `charset` parameter of `Content-Type`, if any.
    pub fn charset(&self) -> Option<String> {
        let value = self.headers.get(header::CONTENT_TYPE)?.to_str().ok()?;
        value.split(';').skip(1).find_map(|param| {
            let (key, value) = param.split_once('=')?;
            key.trim()
                .eq_ignore_ascii_case("charset")
                .then(|| value.trim().trim_matches('"').to_ascii_lowercase())
        })
    }
}

/// Resolves through [`Lookup`] and hands the connector only what the policy allows. A refusal is
/// returned as the [`Blocked`] itself, which the fetcher finds again in the client's error chain.
struct GuardedResolver {
    policy: Arc<Policy>,
    lookup: Arc<dyn Lookup>,
}

impl Resolve for GuardedResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let policy = self.policy.clone();
        let lookup = self.lookup.lookup(name.as_str());
        let host = name.as_str().to_owned();
        Box::pin(async move {
            let refuse = |blocked: Blocked| Box::new(blocked) as Box<dyn StdError + Send + Sync>;
            let found = lookup
                .await
                .map_err(|e| refuse(Blocked::Unresolved { host: host.clone(), reason: e.to_string() }))?;
            let allowed = policy.filter_addresses(&host, &found).map_err(refuse)?;
            Ok(Box::new(allowed.into_iter().map(|ip| SocketAddr::new(ip, 0)))
                as Box<dyn Iterator<Item = SocketAddr> + Send>)
        })
    }
}

/// The SSRF-safe HTTP client. Cheap to clone; share one.
#[derive(Clone)]
pub struct Fetcher {
    client: reqwest::Client,
    policy: Arc<Policy>,
    lookup: Arc<dyn Lookup>,
    limits: Limits,
}

impl fmt::Debug for Fetcher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Fetcher")
            .field("policy", &self.policy)
            .field("limits", &self.limits)
            .finish_non_exhaustive()
    }
}

/// The user agent sent unless the request sets its own.
pub const USER_AGENT: &str = "Mozilla/5.0 (compatible; Toolhost; +safe-fetch)";

impl Fetcher {
    /// A fetcher using the system resolver.
    ///
    /// # Errors
    ///
    /// [`FetchError::Client`] when the TLS setup fails.
    pub fn new(policy: Policy, limits: Limits) -> Result<Self, FetchError> {
        Self::with_lookup(policy, limits, Arc::new(SystemLookup))
    }

    /// A fetcher resolving names through `lookup`.
    ///
    /// # Errors
    ///
    /// [`FetchError::Client`] when the TLS setup fails.
    pub fn with_lookup(policy: Policy, limits: Limits, lookup: Arc<dyn Lookup>) -> Result<Self, FetchError> {
        let policy = Arc::new(policy);
        let resolver = GuardedResolver { policy: policy.clone(), lookup: lookup.clone() };
        let client = reqwest::Client::builder()
            .no_proxy()
            .redirect(reqwest::redirect::Policy::none())
            .retry(reqwest::retry::never())
            .dns_resolver(Arc::new(resolver))
            .connect_timeout(limits.connect_time)
            .user_agent(USER_AGENT)
            .build()
            .map_err(|e| FetchError::Client(error_chain(&e)))?;
        Ok(Self { client, policy, lookup, limits })
    }

    /// The policy.
    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    /// The caps.
    pub fn limits(&self) -> Limits {
        self.limits
    }

    /// The decision for a URL, resolving its host but never connecting: the addresses a fetch
    /// would use.
    ///
    /// # Errors
    ///
    /// The URL is invalid or refused.
    pub async fn check(&self, url: &str) -> Result<Vec<IpAddr>, FetchError> {
        let parsed = parse(url)?;
        let blocked = |blocked| FetchError::Blocked { url: url.to_owned(), blocked };
        match self.policy.check_url(&parsed).map_err(blocked)? {
            Target::Address(ip) => Ok(vec![ip]),
            Target::Name(host) => {
                let found = self.lookup.lookup(&host).await.map_err(|e| {
                    blocked(Blocked::Unresolved { host: host.clone(), reason: e.to_string() })
                })?;
                self.policy.filter_addresses(&host, &found).map_err(blocked)
            }
        }
    }

    /// GETs a URL.
    ///
    /// # Errors
    ///
    /// See [`FetchError`].
    pub async fn get(&self, url: &str) -> Result<Response, FetchError> {
        self.send(Request::get(url)).await
    }

    /// Sends a request, following redirects by hand and reading the body within the caps.
    ///
    /// # Errors
    ///
    /// See [`FetchError`]; a non-2xx status is a [`Response`], not an error.
    pub async fn send(&self, request: Request) -> Result<Response, FetchError> {
        let limit = self.limits.total_time;
        let url = Url::parse(request.url.trim()).map_or_else(|_| request.url.clone(), |u| for_messages(&u));
        match tokio::time::timeout(limit, self.exchange(request)).await {
            Ok(result) => result,
            Err(_) => Err(FetchError::Timeout { url, after: limit }),
        }
    }

    async fn exchange(&self, request: Request) -> Result<Response, FetchError> {
        let Request { mut method, url: first, mut headers, mut body, truncate } = request;
        let mut url = parse(&first)?;
        let mut redirects = Vec::new();
        loop {
            self.policy
                .check_url(&url)
                .map_err(|blocked| FetchError::Blocked { url: for_messages(&url), blocked })?;
            let mut builder = self.client.request(method.clone(), url.clone()).headers(headers.clone());
            if let Some(body) = &body {
                builder = builder.body(body.clone());
            }
            let response = builder.send().await.map_err(|e| self.transport(&url, &e))?;
            let status = response.status();
            if status.is_redirection() && status != StatusCode::NOT_MODIFIED {
                let bad = || FetchError::BadRedirect { url: for_messages(&url), status: status.as_u16() };
                let location = response.headers().get(header::LOCATION).ok_or_else(bad)?;
                let next = location.to_str().ok().and_then(|l| url.join(l).ok()).ok_or_else(bad)?;
                if redirects.len() >= self.limits.max_redirects {
                    return Err(FetchError::TooManyRedirects {
                        // Without its query, as every message names a URL (it may carry a key).
                        url: parse(&first).map_or(first, |u| for_messages(&u)),
                        limit: self.limits.max_redirects,
                    });
                }
                if status == StatusCode::SEE_OTHER
                    || (method == Method::POST && matches!(status.as_u16(), 301 | 302))
                {
                    method = Method::GET;
                    body = None;
                    headers.remove(header::CONTENT_TYPE);
                }
                if next.origin() != url.origin() {
                    headers.retain_safe();
                }
                redirects.push(std::mem::replace(&mut url, next));
                continue;
            }
            let headers = response.headers().clone();
            let (body, truncated) = self.read_body(&url, response, truncate).await?;
            return Ok(Response { status, url, redirects, headers, body, truncated });
        }
    }

    async fn read_body(
        &self,
        url: &Url,
        mut response: reqwest::Response,
        truncate: bool,
    ) -> Result<(Bytes, bool), FetchError> {
        let limit = self.limits.max_body_bytes;
        let mut body = BytesMut::new();
        while let Some(chunk) = response.chunk().await.map_err(|e| self.transport(url, &e))? {
            if body.len() + chunk.len() > limit {
                if !truncate {
                    return Err(FetchError::TooLarge { url: for_messages(url), limit });
                }
                body.extend_from_slice(&chunk[..limit - body.len()]);
                return Ok((body.freeze(), true));
            }
            body.extend_from_slice(&chunk);
        }
        Ok((body.freeze(), false))
    }
}

/// Headers that may follow a redirect to another origin.
trait RetainSafe {
    fn retain_safe(&mut self);
}

impl RetainSafe for HeaderMap {
    fn retain_safe(&mut self) {
        let keep = [header::ACCEPT, header::ACCEPT_LANGUAGE, header::USER_AGENT];
        let kept: Vec<(HeaderName, HeaderValue)> =
            keep.into_iter().filter_map(|name| self.get(&name).cloned().map(|v| (name, v))).collect();
        self.clear();
        self.extend(kept);
    }
}

fn parse(url: &str) -> Result<Url, FetchError> {
    Url::parse(url.trim()).map_err(|e| FetchError::InvalidUrl { url: url.to_owned(), reason: e.to_string() })
}

impl Fetcher {
    /// The resolver's refusal behind a client error, or the error's causes.
    fn transport(&self, url: &Url, error: &reqwest::Error) -> FetchError {
        let shown = for_messages(url);
        if let Some(blocked) = find_blocked(error) {
            return FetchError::Blocked { url: shown, blocked: blocked.clone() };
        }
        if error.is_timeout() {
            return FetchError::Transport { url: shown, reason: "the connection timed out".into() };
        }
        // The client's own message repeats the URL (query included); its causes do not.
        let reason = error.source().map_or_else(|| "the request failed".to_owned(), error_chain);
        FetchError::Transport { url: shown, reason }
    }
}

/// The policy's refusal in an error chain. An `io::Error` wrapping another error reports that
/// error's *source* as its own, so the wrapped error itself is looked at too.
fn find_blocked<'e>(error: &'e (dyn StdError + 'static)) -> Option<&'e Blocked> {
    let mut source: Option<&(dyn StdError + 'static)> = Some(error);
    while let Some(e) = source {
        if let Some(blocked) = e.downcast_ref::<Blocked>() {
            return Some(blocked);
        }
        if let Some(inner) = e.downcast_ref::<io::Error>().and_then(|io| io.get_ref())
            && let Some(blocked) = find_blocked(inner)
        {
            return Some(blocked);
        }
        source = e.source();
    }
    None
}

/// A URL as messages show it: without its query and fragment, which may carry keys.
fn for_messages(url: &Url) -> String {
    let mut shown = url.clone();
    let had_query = shown.query().is_some();
    shown.set_query(None);
    shown.set_fragment(None);
    let mut text = shown.to_string();
    if had_query {
        text.push_str("?…");
    }
    text
}

/// An error and its sources, outermost first, without repeats.
fn error_chain(error: &(dyn StdError + 'static)) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut source = Some(error);
    while let Some(e) = source {
        let text = e.to_string();
        if !parts.iter().any(|p| p.contains(&text)) {
            parts.push(text);
        }
        source = e.source();
    }
    parts.join(": ")
}
