//! The console at `/console`: a web page for the people who approve and operate.
//!
//! * **Sign-in**: a person or approver key (or an operator key, for the operator's pages), typed
//!   once into `/console/login`, is exchanged for a session: a random token in an `HttpOnly`,
//!   `SameSite=Strict` cookie (`Secure` behind TLS), kept in the journal's database as its
//!   SHA-256 (so every instance knows it) with the CSRF token its forms carry and when it ends
//!   (12 hours). Agent keys are refused with the reason. A key that a reload removed signs its
//!   sessions out. Without keys (loopback development) the console is open, as the server is.
//! * **Every state-changing request** carries the session's CSRF token (a form field `csrf` or an
//!   `X-CSRF-Token` header) and, when the browser sends one, an `Origin` of this host.
//! * **Headers**: a strict Content-Security-Policy (scripts and styles from this server only, no
//!   inline script or style, no frames), `X-Frame-Options: DENY`, `nosniff`, no caching of pages.
//! * **Live**: `/console/events` streams the tenant's events from every instance (the bus),
//!   turned into what the page shows: a waiting approval as its rendered item, a decision as the
//!   item to take away, a session's calls as its timeline to fetch again.
//!
//! Decisions go through [`crate::approvals`], the same path as the API's, recorded as `KEY via
//! console`.

mod html;
pub mod notify;
mod pages;

use std::sync::Arc;

use axum::Router;
use axum::extract::{FromRequestParts, State};
use axum::http::request::Parts;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use sha2::{Digest as _, Sha256};

use crate::auth::{OPEN_TENANT, Principal, Role};
use crate::state::AppState;

/// The session cookie.
pub const COOKIE: &str = "toolhost_console";
/// How long a console session lasts.
pub const SESSION_MS: i64 = 12 * 3600 * 1000;

/// The console's routes.
pub fn routes() -> Router<Arc<AppState>> {
    Router::new()
        .route("/console", axum::routing::get(|| async { Redirect::to("/console/approvals") }))
        .route("/console/", axum::routing::get(|| async { Redirect::to("/console/approvals") }))
        .route("/console/login", axum::routing::get(pages::login_page).post(pages::login))
        .route("/console/logout", axum::routing::post(pages::logout))
        .route("/console/approvals", axum::routing::get(pages::inbox))
        .route("/console/approvals/waiting", axum::routing::get(pages::waiting_fragment))
        .route("/console/approvals/{id}", axum::routing::get(pages::approval_page))
        .route("/console/approvals/{id}/item", axum::routing::get(pages::approval_item))
        .route("/console/approvals/{id}/decide", axum::routing::post(pages::decide))
        .route("/console/sessions", axum::routing::get(pages::sessions))
        .route("/console/sessions/{id}", axum::routing::get(pages::session_page))
        .route("/console/sessions/{id}/timeline", axum::routing::get(pages::timeline_fragment))
        .route("/console/journal", axum::routing::get(pages::journal))
        .route("/console/journal/{key}", axum::routing::get(pages::record))
        .route("/console/rules", axum::routing::get(pages::rules))
        .route("/console/rules/{id}/revoke", axum::routing::post(pages::revoke))
        .route("/console/operator", axum::routing::get(pages::operator))
        .route("/console/events", axum::routing::get(pages::events))
        .route("/console/assets/{name}", axum::routing::get(assets))
        .layer(axum::middleware::map_response(secure))
}

/// Security headers on every console response.
async fn secure(mut response: Response) -> Response {
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; \
             form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
        ),
    );
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    headers.insert(header::REFERRER_POLICY, HeaderValue::from_static("same-origin"));
    if !headers.contains_key(header::CACHE_CONTROL) {
        headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    }
    response
}

const SCRIPT: &str = include_str!("../../assets/console/console.js");
const STYLE: &str = include_str!("../../assets/console/console.css");

/// An asset's address, with its content's hash (cached for ever, changed when it changes).
pub fn asset(name: &str) -> String {
    let text = match name {
        "console.js" => SCRIPT,
        _ => STYLE,
    };
    let hash: String = Sha256::digest(text.as_bytes()).iter().take(6).map(|b| format!("{b:02x}")).collect();
    format!("/console/assets/{name}?v={hash}")
}

async fn assets(axum::extract::Path(name): axum::extract::Path<String>) -> Response {
    let (body, kind) = match name.as_str() {
        "console.js" => (SCRIPT, "text/javascript; charset=utf-8"),
        "console.css" => (STYLE, "text/css; charset=utf-8"),
        _ => return StatusCode::NOT_FOUND.into_response(),
    };
    ([(header::CONTENT_TYPE, kind), (header::CACHE_CONTROL, "public, max-age=31536000, immutable")], body)
        .into_response()
}

/// Who is looking at the console: a signed-in key, with its session's CSRF token.
#[derive(Debug, Clone)]
pub struct Viewer {
    /// The key.
    pub principal: Principal,
    /// What this session's forms carry.
    pub csrf: String,
    /// The session (its token's digest).
    digest: String,
}

impl Viewer {
    /// Whether the key decides approvals (its tenant's pages).
    pub fn decides(&self, state: &AppState) -> bool {
        self.principal.role.decides() || state.args.agent_keys_decide
    }

    /// Whether the key operates the server (the operator's pages).
    pub fn operates(&self) -> bool {
        self.principal.role.operates() || self.principal.id == OPEN_TENANT
    }

    /// The sections the viewer may open: `(href, label, name)`.
    pub fn sections(&self) -> Vec<(&'static str, &'static str, &'static str)> {
        let mut sections = Vec::new();
        if !self.principal.role.operates() {
            sections.extend([
                ("/console/approvals", "Approvals", "approvals"),
                ("/console/sessions", "Sessions", "sessions"),
                ("/console/journal", "Journal", "journal"),
                ("/console/rules", "Rules", "rules"),
            ]);
        }
        if self.operates() {
            sections.push(("/console/operator", "Operator", "operator"));
        }
        sections
    }

    /// Checks a state-changing request's CSRF token.
    ///
    /// # Errors
    ///
    /// 403 when it is missing or another.
    pub fn check(&self, token: Option<&str>) -> Result<(), Response> {
        use subtle::ConstantTimeEq as _;
        match token {
            Some(token) if bool::from(token.as_bytes().ct_eq(self.csrf.as_bytes())) => Ok(()),
            _ => Err(refused(
                StatusCode::FORBIDDEN,
                "this form is stale or did not come from the console: reload the page",
            )),
        }
    }
}

/// A plain refusal the console's script and a person both read.
pub fn refused(status: StatusCode, message: &str) -> Response {
    (status, [(header::CONTENT_TYPE, "text/plain; charset=utf-8")], message.to_owned()).into_response()
}

/// The SHA-256 (hex) of a token, as sessions are kept.
fn digest(token: &str) -> String {
    Sha256::digest(token.as_bytes()).iter().map(|b| format!("{b:02x}")).collect()
}

/// A random token (32 bytes, hex).
fn token() -> Result<String, Response> {
    crate::auth::generate_key()
        .map(|key| key.trim_start_matches("th_").to_owned())
        .map_err(|_| refused(StatusCode::INTERNAL_SERVER_ERROR, "no randomness for a session"))
}

fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}

/// The session cookie's value, if the request has one.
fn cookie(parts: &Parts) -> Option<String> {
    parts
        .headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == COOKIE)
        .map(|(_, value)| value.to_owned())
}

/// Whether the key a session was made with is still one of the server's (a reload may have taken
/// it away).
fn still_held(state: &AppState, principal: &str) -> bool {
    if state.keys.is_open() {
        return principal == OPEN_TENANT;
    }
    let mut parts = principal.splitn(3, '/');
    let (Some(tenant), Some(role), Some(name)) = (parts.next(), parts.next(), parts.next()) else {
        return false;
    };
    state.keys.entries().iter().any(|(t, r, n)| t == tenant && r.as_str() == role && n == name)
}

/// Why a request has no viewer: pages go to the sign-in page, the rest is told.
#[derive(Debug)]
pub struct SignIn {
    page: bool,
    next: String,
}

impl IntoResponse for SignIn {
    fn into_response(self) -> Response {
        if self.page {
            let next: String = url_escape(&self.next);
            Redirect::to(&format!("/console/login?next={next}")).into_response()
        } else {
            refused(StatusCode::UNAUTHORIZED, "signed out: sign in again")
        }
    }
}

fn url_escape(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'/' => (b as char).to_string(),
            other => format!("%{other:02X}"),
        })
        .collect()
}

impl FromRequestParts<Arc<AppState>> for Viewer {
    type Rejection = SignIn;

    async fn from_request_parts(parts: &mut Parts, state: &Arc<AppState>) -> Result<Self, Self::Rejection> {
        let page = parts.method == axum::http::Method::GET
            && !parts.uri.path().starts_with("/console/events")
            && !parts.uri.path().ends_with("/item")
            && !parts.uri.path().ends_with("/waiting")
            && !parts.uri.path().ends_with("/timeline");
        let next = parts.uri.path_and_query().map_or("/console", |p| p.as_str()).to_owned();
        let reject = || SignIn { page, next: next.clone() };
        let token = cookie(parts).ok_or_else(reject)?;
        let digest = digest(&token);
        let session =
            state.journal.console_session(&digest, now_ms()).await.ok().flatten().ok_or_else(reject)?;
        if !still_held(state, &session.principal) {
            let _ = state.journal.end_console_session(&digest).await;
            return Err(reject());
        }
        let role = match session.role.as_str() {
            "operator" => Role::Operator,
            "approver" => Role::Approver,
            "agent" => Role::Agent,
            _ => Role::Person,
        };
        let principal = Principal { tenant: session.tenant, role, id: session.principal };
        if let Some(audit) = parts.extensions.get::<crate::RequestAudit>() {
            audit.note(&principal.tenant, &format!("{} via console", principal.id));
        }
        Ok(Self { principal, csrf: session.csrf, digest })
    }
}

/// Whether a browser's `Origin` (when it sends one) is this server.
pub fn same_origin(headers: &axum::http::HeaderMap) -> bool {
    let Some(origin) = headers.get(header::ORIGIN).and_then(|v| v.to_str().ok()) else { return true };
    let host = headers.get(header::HOST).and_then(|v| v.to_str().ok()).unwrap_or_default();
    let origin_host = origin.split_once("://").map_or(origin, |(_, rest)| rest);
    !host.is_empty() && origin_host.eq_ignore_ascii_case(host)
}

/// Opens a session for `principal` and answers with its cookie and a redirect to `next`.
pub async fn open(
    state: &Arc<AppState>,
    principal: &Principal,
    next: &str,
    secure: bool,
) -> Result<Response, Response> {
    let token = token()?;
    let now = now_ms();
    let session = journal::ConsoleSession {
        digest: digest(&token),
        tenant: principal.tenant.clone(),
        principal: principal.id.clone(),
        role: principal.role.as_str().to_owned(),
        csrf: self::token()?,
        created_at: now,
        expires_at: now + SESSION_MS,
    };
    state.journal.put_console_session(&session).await.map_err(|_| {
        refused(StatusCode::SERVICE_UNAVAILABLE, "the journal cannot keep a session now; try again")
    })?;
    tracing::info!(event = "console.signin", tenant = %principal.tenant, key = %principal.id, "signed in to the console");
    // Only a path of the console's own: never an address elsewhere.
    let next =
        if next.starts_with("/console") && !next.starts_with("//") { next } else { "/console/approvals" };
    let cookie = format!(
        "{COOKIE}={token}; Path=/console; HttpOnly; SameSite=Strict; Max-Age={}{}",
        SESSION_MS / 1000,
        if secure { "; Secure" } else { "" }
    );
    let mut response = Redirect::to(next).into_response();
    if let Ok(value) = HeaderValue::from_str(&cookie) {
        response.headers_mut().insert(header::SET_COOKIE, value);
    }
    Ok(response)
}

/// Ends the viewer's session and clears the cookie.
pub async fn close(state: &AppState, viewer: &Viewer) -> Response {
    let _ = state.journal.end_console_session(&viewer.digest).await;
    tracing::info!(event = "console.signout", key = %viewer.principal.id, "signed out of the console");
    let mut response = Redirect::to("/console/login").into_response();
    response.headers_mut().insert(
        header::SET_COOKIE,
        HeaderValue::from_static("toolhost_console=; Path=/console; HttpOnly; SameSite=Strict; Max-Age=0"),
    );
    response
}

/// Whether the request came over TLS (directly or through a proxy that says so): the cookie is
/// then `Secure`.
pub fn over_tls(state: &AppState, headers: &axum::http::HeaderMap) -> bool {
    headers
        .get("x-forwarded-proto")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|p| p.eq_ignore_ascii_case("https"))
        || state.console_url().starts_with("https://")
}

/// The state a handler needs, with the viewer.
pub type Console = State<Arc<AppState>>;
