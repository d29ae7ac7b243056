//! The console's pages and actions.

use std::convert::Infallible;
use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{Html, IntoResponse, Redirect, Response};
use journal::{Attempt, AttemptFilter, AttemptStatus, PendingApproval};
use maud::{Markup, html};
use serde::Deserialize;
use serde_json::{Value, json};
use tool_core::ToolOutput;
use tool_executor::{Decision, Event};

use super::html::{self as ui, page};
use super::{Viewer, refused};
use crate::approvals::{self, Via};
use crate::auth::Role;
use crate::state::{AppState, SessionView};

/// Waiting approvals a page of the inbox shows.
const INBOX_PAGE: usize = 50;
/// Rows a page of the journal or the sessions shows.
const LIST_PAGE: u32 = 50;

fn registry() -> &'static builtin_tools::Registry {
    builtin_tools::Registry::builtin()
}

fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}

fn internal(error: impl std::fmt::Display) -> Response {
    tracing::error!(%error, "console");
    refused(StatusCode::INTERNAL_SERVER_ERROR, "something failed on the server; see its log")
}

// ---------------------------------------------------------------- sign-in

#[derive(Debug, Deserialize)]
pub struct Next {
    #[serde(default)]
    next: Option<String>,
    #[serde(default)]
    error: Option<String>,
}

/// `GET /console/login`: the sign-in form (on a server without keys, straight in).
pub async fn login_page(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    Query(query): Query<Next>,
) -> Response {
    let next = query.next.unwrap_or_else(|| "/console/approvals".into());
    if state.keys.is_open() {
        // The server answers loopback only: whoever reaches it is the person at this machine.
        let principal = crate::auth::Principal {
            tenant: crate::auth::OPEN_TENANT.into(),
            role: Role::Person,
            id: crate::auth::OPEN_TENANT.into(),
        };
        return super::open(&state, &principal, &next, super::over_tls(&state, &headers))
            .await
            .unwrap_or_else(|e| e);
    }
    let error = query.error.as_deref().map(|code| match code {
        "agent" => {
            "An agent key proposes calls; it cannot sign in to decide them. Sign in with a person or \
                    approver key (or an operator key, for the operator's pages)."
        }
        "unknown" => "That key is not one of this server's.",
        _ => "Signing in failed.",
    });
    let body = html! {
        @if let Some(error) = error { (ui::notice("error", error)) }
        form class="login" method="post" action="/console/login" {
            input type="hidden" name="next" value=(next);
            label for="key" { "Your key" }
            input id="key" name="key" type="password" autocomplete="current-password" required autofocus;
            p class="hint" { "A person or approver key decides approvals; an operator key opens the operator's pages. \
                              Agent keys cannot sign in." }
            button type="submit" { "Sign in" }
        }
    };
    Html(page(None, "Sign in", "login", body).into_string()).into_response()
}

#[derive(Debug, Deserialize)]
pub struct LoginForm {
    key: String,
    #[serde(default)]
    next: Option<String>,
}

/// `POST /console/login`: a key for a session.
pub async fn login(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    axum::Form(form): axum::Form<LoginForm>,
) -> Response {
    // A page elsewhere cannot sign a visitor in (to a tenant of its choosing).
    if !super::same_origin(&headers) {
        return refused(StatusCode::FORBIDDEN, "sign in from the console's own page");
    }
    let next = form.next.unwrap_or_else(|| "/console/approvals".into());
    let principal = match state.keys.principal(Some(&format!("Bearer {}", form.key.trim()))) {
        Ok(principal) => principal,
        Err(_) => {
            state.metrics.refused_keys.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            tracing::warn!(
                event = "auth.refused",
                reason = "unknown API key",
                route = "/console/login",
                "a console sign-in was refused"
            );
            return Redirect::to("/console/login?error=unknown").into_response();
        }
    };
    if principal.role == Role::Agent && !state.args.agent_keys_decide {
        tracing::warn!(event = "auth.refused", reason = "agent key", key = %principal.id, route = "/console/login", "an agent key cannot sign in to the console");
        let mut response = Redirect::to("/console/login?error=agent").into_response();
        *response.status_mut() = StatusCode::SEE_OTHER;
        return response;
    }
    super::open(&state, &principal, &next, super::over_tls(&state, &headers)).await.unwrap_or_else(|e| e)
}

#[derive(Debug, Deserialize)]
pub struct CsrfForm {
    #[serde(default)]
    csrf: Option<String>,
}

/// `POST /console/logout`.
pub async fn logout(
    State(state): State<Arc<AppState>>,
    viewer: Viewer,
    headers: HeaderMap,
    axum::Form(form): axum::Form<CsrfForm>,
) -> Response {
    if let Err(refusal) = viewer.check(csrf(&headers, form.csrf.as_deref())) {
        return refusal;
    }
    super::close(&state, &viewer).await
}

/// The CSRF token of a request: the header the script sends, else the form's field.
fn csrf<'a>(headers: &'a HeaderMap, form: Option<&'a str>) -> Option<&'a str> {
    headers.get("x-csrf-token").and_then(|v| v.to_str().ok()).or(form)
}

// ---------------------------------------------------------------- approvals

/// What an approval item shows, gathered.
struct Item {
    row: PendingApproval,
    attempt: Option<Attempt>,
    session: Option<SessionView>,
    question: Option<tool_core::Question>,
}

async fn item(state: &AppState, row: PendingApproval) -> Item {
    let attempt = state.journal.get(&row.tenant, &row.attempt_key).await.ok().flatten();
    let session = state
        .journal
        .get_session(&row.tenant, &row.session_id)
        .await
        .ok()
        .flatten()
        .and_then(|record| serde_json::from_value::<SessionView>(record.config).ok());
    let question = approvals::question_of(&row);
    Item { row, attempt, session, question }
}

/// The tool's card for what is asked, and for a write the change it makes to the file as it is
/// now (a file inside the session's folder).
fn asked_card(state: &AppState, item: &Item) -> Markup {
    let row = &item.row;
    let card = registry().render(&row.tool).intervention(&row.api, &row.arguments);
    let change = (row.api == "writeFile")
        .then(|| write_diff(state, &row.tenant, item.session.as_ref(), &row.arguments))
        .flatten();
    html! {
        (ui::card(&card))
        @if let Some(diff) = change {
            details class="change" open {
                summary { "The change to the file as it is now" }
                (ui::diff(&diff))
            }
        }
    }
}

/// The unified diff a `writeFile` would make, for a file this server may show the tenant: inside
/// the session's folder or the tenant's workspace roots (on an open server, the one person's
/// machine, anywhere). Only a session that runs its files on this server; at most 1 MiB.
fn write_diff(
    state: &AppState,
    tenant: &str,
    session: Option<&SessionView>,
    arguments: &Value,
) -> Option<String> {
    let session = session.filter(|s| s.runs_on == crate::state::RunsOn::Server)?;
    let folder = std::path::Path::new(session.working_directory.as_deref()?).canonicalize().ok()?;
    let asked = std::path::Path::new(arguments.get("path")?.as_str()?);
    let path = if asked.is_absolute() { asked.to_path_buf() } else { folder.join(asked) };
    let new = arguments.get("content")?.as_str()?;
    let roots: Option<Vec<std::path::PathBuf>> = state.hard_roots(tenant).map(|roots| {
        roots
            .iter()
            .filter_map(|root| root.path.canonicalize().ok())
            .chain(std::iter::once(folder.clone()))
            .collect()
    });
    let shown_here =
        |real: &std::path::Path| roots.as_ref().is_none_or(|roots| roots.iter().any(|r| real.starts_with(r)));
    let old = match path.canonicalize() {
        Ok(real) if shown_here(&real) && real.is_file() => {
            let metadata = std::fs::metadata(&real).ok()?;
            if metadata.len() > 1 << 20 {
                return None;
            }
            std::fs::read_to_string(&real).ok()?
        }
        // A new file (its folder one this server shows): all of it is added.
        Err(_) if path.parent().and_then(|p| p.canonicalize().ok()).is_some_and(|p| shown_here(&p)) => {
            String::new()
        }
        _ => return None,
    };
    let shown = asked.display().to_string();
    Some(
        similar::TextDiff::from_lines(old.as_str(), new)
            .unified_diff()
            .context_radius(3)
            .header(&format!("a/{shown}"), &format!("b/{shown}"))
            .to_string(),
    )
}

/// What "for the session" and "always" grant, for the person to see (and narrow or widen).
enum Grants {
    /// A command: "always" remembers commands starting with this prefix (editable); "for the
    /// session" is this command word for word.
    Command(String),
    /// A call naming files: both grant the API within this scope (the files' folder, editable).
    Within(String),
    /// A call naming files no folder can be offered for: both grant these very files.
    TheseFiles,
    /// Anything else: the API.
    Whole,
}

fn grants_of(state: &AppState, item: &Item) -> Grants {
    let row = &item.row;
    if let Some(command) = row.arguments.get("command").and_then(Value::as_str) {
        return Grants::Command(tool_executor::approval::suggest_prefix(command).prefix);
    }
    match approvals::scope_offer(state, row, item.session.as_ref()) {
        Some(Some(scope)) => Grants::Within(scope),
        Some(None) => Grants::TheseFiles,
        None => Grants::Whole,
    }
}

/// One waiting approval (or question), as the inbox shows it and the live stream sends it.
fn item_markup(state: &AppState, viewer: &Viewer, item: &Item, alone: bool) -> Markup {
    let row = &item.row;
    let now = now_ms();
    let expires = row.created_at
        + i64::try_from(state.args.approval_timeout_secs.saturating_mul(1000)).unwrap_or(i64::MAX);
    let proposed_by = item
        .session
        .as_ref()
        .map(|s| {
            let mut who = Vec::new();
            if let Some(agent) = &s.agent_id {
                who.push(format!("agent {agent}"));
            }
            if let Some(key) = &s.created_by {
                who.push(format!("key {key}"));
            }
            if who.is_empty() { "—".to_owned() } else { who.join(", ") }
        })
        .unwrap_or_else(|| "—".into());
    let tier = item.attempt.as_ref().and_then(|a| a.tier.clone()).unwrap_or_default();
    let grants = grants_of(state, item);
    let what = format!("{}/{}", row.tool, row.api);
    let decides = viewer.decides(state);
    html! {
        article class="approval" data-approval-id=(row.id) data-session=(row.session_id) data-call=(row.call_id)
            tabindex="0" aria-labelledby={ "t-" (row.id) } {
            header {
                h2 id={ "t-" (row.id) } {
                    @if item.question.is_some() { "Question from " } @else { "Approve " }
                    code { (row.tool) "/" (row.api) }
                }
                p class="reason" {
                    strong { "Why a person: " } (row.reason)
                    @if !tier.is_empty() { " · tier " (tier) }
                }
            }
            @match &item.question {
                Some(question) => {
                    p class="question" { (question.question) }
                }
                None => { (asked_card(state, item)) }
            }
            dl class="meta" {
                dt { "Session" } dd { a href={ "/console/sessions/" (row.session_id) } { code { (row.session_id) } } }
                dt { "Proposed by" } dd { (proposed_by) }
                dt { "Waiting" } dd { span data-since=(row.created_at) { (ui::duration(now - row.created_at)) } " (since " (ui::time(row.created_at)) ")" }
                dt { "Expires" } dd { (ui::time(expires)) }
                @if !alone { dt { "Link" } dd { a href={ "/console/approvals/" (row.id) } { "this approval" } } }
            }
            @if decides {
                form class="decide" method="post" action={ "/console/approvals/" (row.id) "/decide" } {
                    input type="hidden" name="csrf" value=(viewer.csrf);
                    @match &item.question {
                        Some(question) => {
                            @if !question.options.is_empty() {
                                fieldset {
                                    legend { "Choose" }
                                    @for option in &question.options {
                                        label class="choice" {
                                            input type=(if question.multiple { "checkbox" } else { "radio" }) name="choice" value=(option);
                                            " " (option)
                                        }
                                    }
                                }
                            }
                            @if question.options.is_empty() || question.allow_other {
                                label { "Your answer" input type="text" name="text"; }
                            }
                            div class="actions" {
                                button type="submit" name="action" value="answer" data-action="answer" { "Answer" }
                                button type="submit" name="action" value="deny" data-action="deny" { "Decline (n)" }
                            }
                        }
                        None => {
                            div class="actions" {
                                button type="submit" name="action" value="allow-once" data-action="allow-once" { "Allow once (y)" }
                                button type="submit" name="action" value="allow-session" data-action="allow-session" {
                                    @match &grants {
                                        Grants::Command(_) => "Allow this command for the session (s)",
                                        Grants::Within(_) | Grants::TheseFiles => "Allow these files for the session (s)",
                                        Grants::Whole => "Allow for this session (s)",
                                    }
                                }
                                button type="submit" name="action" value="allow-always" data-action="allow-always" { "Allow always (a)" }
                            }
                            div class="rule" {
                                @match &grants {
                                    Grants::Command(prefix) => {
                                        label for={ "p-" (row.id) } { "“Always” remembers: " (what) " for commands starting with" }
                                        input id={ "p-" (row.id) } type="text" name="prefix" value=(prefix);
                                    }
                                    Grants::Within(scope) => {
                                        label for={ "p-" (row.id) } { "“For the session” and “always” allow " (what) " of files within (a file or folder holding this call’s files)" }
                                        input id={ "p-" (row.id) } type="text" name="prefix" value=(scope);
                                    }
                                    Grants::TheseFiles => {
                                        p { "“For the session” and “always” allow " (what) " of these files only" }
                                    }
                                    Grants::Whole => {
                                        p { "“Always” remembers: every " (what) " call in this project" }
                                    }
                                }
                            }
                            div class="deny" {
                                label for={ "m-" (row.id) } { "Message for the model (with a denial)" }
                                input id={ "m-" (row.id) } type="text" name="message" placeholder="Why not, and what to do instead";
                                button type="submit" name="action" value="deny" data-action="deny" { "Deny (n)" }
                            }
                        }
                    }
                }
            } @else {
                p class="hint" { "This key may not decide approvals." }
            }
        }
    }
}

fn decided_markup(row: &PendingApproval) -> Markup {
    let how =
        row.decision.as_ref().and_then(|d| d.get("kind")).and_then(Value::as_str).unwrap_or(&row.status);
    html! {
        tr data-approval-id=(row.id) {
            td { (ui::time(row.decided_at.unwrap_or(row.created_at))) }
            td { code { (row.tool) "/" (row.api) } }
            td { (how) }
            td { (row.decided_by.as_deref().unwrap_or("no one")) }
            td { a href={ "/console/sessions/" (row.session_id) } { code { (row.session_id) } } }
        }
    }
}

#[derive(Debug, Deserialize)]
pub struct InboxQuery {
    #[serde(default)]
    page: Option<usize>,
    #[serde(default)]
    notice: Option<String>,
}

/// One page of the tenant's waiting approvals, newest first, with how many wait in all.
async fn waiting_page(
    state: &AppState,
    tenant: &str,
    page_number: usize,
) -> Result<(Vec<Item>, usize), Response> {
    let mut waiting =
        approvals::pending(state, tenant, None).await.map_err(|error| internal(error.message()))?;
    waiting.reverse();
    let total = waiting.len();
    let shown: Vec<PendingApproval> =
        waiting.into_iter().skip(page_number * INBOX_PAGE).take(INBOX_PAGE).collect();
    let mut items = Vec::with_capacity(shown.len());
    for row in shown {
        items.push(item(state, row).await);
    }
    Ok((items, total))
}

/// `GET /console/approvals/waiting`: the first page's items (what the script fetches when its
/// stream opens or comes back, to catch up with what it could not hear).
pub async fn waiting_fragment(State(state): State<Arc<AppState>>, viewer: Viewer) -> Response {
    match waiting_page(&state, &viewer.principal.tenant, 0).await {
        Ok((items, total)) => {
            let markup = html! { @for item in &items { (item_markup(&state, &viewer, item, false)) } };
            ([("x-waiting-total", total.to_string())], Html(markup.into_string())).into_response()
        }
        Err(response) => response,
    }
}

/// `GET /console/approvals`: every call waiting for the tenant, newest first, and the latest
/// decided.
pub async fn inbox(
    State(state): State<Arc<AppState>>,
    viewer: Viewer,
    Query(query): Query<InboxQuery>,
) -> Response {
    if viewer.principal.role.operates() && !state.keys.is_open() {
        return Redirect::to("/console/operator").into_response();
    }
    let tenant = &viewer.principal.tenant;
    let page_number = query.page.unwrap_or(0);
    let (items, total) = match waiting_page(&state, tenant, page_number).await {
        Ok(found) => found,
        Err(response) => return response,
    };
    let decided = state.journal.decided_approvals(tenant, 20).await.unwrap_or_default();
    let body = html! {
        @if let Some(notice) = &query.notice { (ui::notice("info", notice)) }
        p class="hint keys" {
            "Keys: " kbd{"j"} "/" kbd{"k"} " move, " kbd{"y"} " allow once, " kbd{"s"} " for the session, "
            kbd{"a"} " always, " kbd{"n"} " deny. New calls appear as they are proposed."
        }
        section aria-labelledby="waiting-title" {
            h2 id="waiting-title" { "Waiting " span id="waiting-count" { (total) } }
            div id="pending" data-page=(page_number) {
                @for item in &items { (item_markup(&state, &viewer, item, false)) }
            }
            p class="empty" id="none-waiting" hidden[!items.is_empty()] { "Nothing waits for a person." }
            nav class="pages" aria-label="Pages" {
                @if page_number > 0 { a href={ "/console/approvals?page=" (page_number - 1) } { "Newer" } }
                @if (page_number + 1) * INBOX_PAGE < total { a href={ "/console/approvals?page=" (page_number + 1) } { "Older" } }
            }
        }
        section aria-labelledby="decided-title" {
            h2 id="decided-title" { "Decided" }
            div class="table" {
                table id="decided" {
                    thead { tr { th { "When" } th { "Call" } th { "How" } th { "Who" } th { "Session" } } }
                    tbody { @for row in &decided { (decided_markup(row)) } }
                }
            }
        }
    };
    Html(page(Some(&viewer), "Approvals", "approvals", body).into_string()).into_response()
}

/// `GET /console/approvals/{id}`: one approval (the link a notification carries).
pub async fn approval_page(
    State(state): State<Arc<AppState>>,
    viewer: Viewer,
    Path(id): Path<String>,
) -> Response {
    let tenant = &viewer.principal.tenant;
    let Ok(Some(row)) = state.journal.get_approval(tenant, &id).await else {
        let body = ui::notice("error", "No such approval (or another tenant's).");
        return (
            StatusCode::NOT_FOUND,
            Html(page(Some(&viewer), "Approval", "approvals", body).into_string()),
        )
            .into_response();
    };
    let waiting = row.status == "pending";
    let item = item(&state, row).await;
    let body = html! {
        @if waiting {
            div id="pending" data-alone="true" { (item_markup(&state, &viewer, &item, true)) }
        } @else {
            (ui::notice("info", &format!("Decided: {} by {}", item.row.status, item.row.decided_by.as_deref().unwrap_or("no one"))))
            (asked_card(&state, &item))
        }
        p { a href="/console/approvals" { "All approvals" } }
    };
    Html(page(Some(&viewer), "Approval", "approvals", body).into_string()).into_response()
}

/// `GET /console/approvals/{id}/item`: one waiting item's markup (the live stream's fallback).
pub async fn approval_item(
    State(state): State<Arc<AppState>>,
    viewer: Viewer,
    Path(id): Path<String>,
) -> Response {
    match state.journal.get_approval(&viewer.principal.tenant, &id).await {
        Ok(Some(row)) if row.status == "pending" => {
            let item = item(&state, row).await;
            Html(item_markup(&state, &viewer, &item, false).into_string()).into_response()
        }
        _ => StatusCode::NOT_FOUND.into_response(),
    }
}

/// What a rule allows of its API (commands starting …, within a folder), as
/// [`tool_executor::scope::describe`] says it.
fn rule_scope(state: &AppState, rule: &journal::RememberedDecision) -> String {
    let spec =
        state.executor.toolbox().tool(&rule.tool).and_then(|tool| tool.api(&rule.api)).map(|api| &api.spec);
    tool_executor::scope::describe(spec, rule.argument_prefix.as_deref())
}

/// Whether approval `id` waits on a command.
async fn command_asked(state: &AppState, viewer: &Viewer, id: &str) -> bool {
    match state.journal.get_approval(&viewer.principal.tenant, id).await {
        Ok(Some(row)) => row.arguments.get("command").is_some(),
        _ => false,
    }
}

/// `POST /console/approvals/{id}/decide`: the person's decision, through [`approvals::decide`].
pub async fn decide(
    State(state): State<Arc<AppState>>,
    viewer: Viewer,
    headers: HeaderMap,
    Path(id): Path<String>,
    axum::Form(fields): axum::Form<Vec<(String, String)>>,
) -> Response {
    let field = |name: &str| fields.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str());
    if !super::same_origin(&headers) {
        return refused(StatusCode::FORBIDDEN, "decide from the console's own page");
    }
    if let Err(refusal) = viewer.check(csrf(&headers, field("csrf"))) {
        return refusal;
    }
    let text = |name: &str| field(name).map(str::trim).filter(|v| !v.is_empty()).map(str::to_owned);
    let decision = match field("action") {
        Some("allow-once") => Decision::AllowOnce,
        // For a command, this command word for word; for files, the scope in the form (the
        // pipeline takes it only when it holds the call and is neither `/` nor the home folder).
        Some("allow-session") => Decision::AllowSession {
            argument_prefix: if command_asked(&state, &viewer, &id).await { None } else { text("prefix") },
        },
        Some("allow-always") => {
            // For a command, "always" remembers the prefix shown: never none, which would be
            // every command.
            let command = command_asked(&state, &viewer, &id).await;
            let prefix = text("prefix");
            if command && prefix.is_none() {
                return refused(
                    StatusCode::BAD_REQUEST,
                    "“Always” for a command remembers the start of the commands it allows: give one (an empty one would allow every command)",
                );
            }
            Decision::AllowAlways { argument_prefix: prefix }
        }
        Some("deny") => match text("message") {
            Some(message) => Decision::DenyWithMessage { message },
            None => Decision::Deny,
        },
        Some("answer") => Decision::Answer {
            answer: tool_core::Answer {
                choices: fields.iter().filter(|(k, _)| k == "choice").map(|(_, v)| v.clone()).collect(),
                text: text("text"),
            },
        },
        _ => {
            return refused(
                StatusCode::BAD_REQUEST,
                "no action: allow-once, allow-session, allow-always, deny or answer",
            );
        }
    };
    let fetched = headers.get("x-requested-with").is_some_and(|v| v == "fetch");
    match approvals::decide(&state, &viewer.principal, &id, decision, Via::Console).await {
        Ok(outcome) if fetched => axum::Json(outcome).into_response(),
        Ok(outcome) => Redirect::to(&format!(
            "/console/approvals?notice={}",
            super::url_escape(&format!("Decided: {} ({})", outcome.decision, outcome.outcome))
        ))
        .into_response(),
        Err(error) => refused(error.status(), error.message()),
    }
}

// ---------------------------------------------------------------- sessions and calls

#[derive(Debug, Deserialize)]
pub struct SessionsQuery {
    #[serde(default)]
    status: Option<String>,
    #[serde(default)]
    after_at: Option<i64>,
    #[serde(default)]
    after_id: Option<String>,
}

/// `GET /console/sessions`: live and recent sessions, newest first.
pub async fn sessions(
    State(state): State<Arc<AppState>>,
    viewer: Viewer,
    Query(query): Query<SessionsQuery>,
) -> Response {
    let status = query.status.clone().filter(|s| s == "active" || s == "ended");
    let filter = journal::SessionFilter {
        status: status.clone(),
        after: query.after_at.zip(query.after_id.clone()),
        limit: Some(LIST_PAGE),
    };
    let records = match state.journal.list_sessions(&viewer.principal.tenant, &filter).await {
        Ok(records) => records,
        Err(error) => return internal(error),
    };
    let held: std::collections::HashSet<String> =
        state.sessions.read().unwrap_or_else(|p| p.into_inner()).keys().cloned().collect();
    let next =
        records.last().filter(|_| records.len() == LIST_PAGE as usize).map(|r| (r.created_at, r.id.clone()));
    let body = html! {
        nav class="filters" aria-label="Which sessions" {
            a href="/console/sessions" aria-current=[status.is_none().then_some("page")] { "All" }
            a href="/console/sessions?status=active" aria-current=[(status.as_deref() == Some("active")).then_some("page")] { "Live" }
            a href="/console/sessions?status=ended" aria-current=[(status.as_deref() == Some("ended")).then_some("page")] { "Ended" }
        }
        div class="table" {
            table {
                thead { tr { th { "Session" } th { "Status" } th { "Opened" } th { "Folder" } th { "Agent" } th { "Runs on" } } }
                tbody {
                    @for record in &records {
                        @let view = serde_json::from_value::<SessionView>(record.config.clone()).ok();
                        tr {
                            td { a href={ "/console/sessions/" (record.id) } { code { (record.id) } } }
                            td {
                                (record.status)
                                @if held.contains(&record.id) { " " span class="badge info" { "held here" } }
                            }
                            td { (ui::time(record.created_at)) }
                            td { code { (view.as_ref().and_then(|v| v.working_directory.clone()).unwrap_or_default()) } }
                            td { (view.as_ref().and_then(|v| v.agent_id.clone()).unwrap_or_default()) }
                            td { (view.as_ref().map(|v| format!("{:?}", v.runs_on).to_lowercase()).unwrap_or_default()) }
                        }
                    }
                }
            }
        }
        @if records.is_empty() { p class="empty" { "No sessions." } }
        @if let Some((at, id)) = next {
            nav class="pages" { a href={ "/console/sessions?" (status.as_deref().map(|s| format!("status={s}&")).unwrap_or_default()) "after_at=" (at) "&after_id=" (super::url_escape(&id)) } { "Older" } }
        }
    };
    Html(page(Some(&viewer), "Sessions", "sessions", body).into_string()).into_response()
}

/// A journalled call as the tool's render hooks draw its result.
fn call_markup(row: &Attempt) -> Markup {
    let stored = row.result.clone().unwrap_or(Value::Null);
    let output = ToolOutput {
        content: stored.get("content").and_then(Value::as_str).unwrap_or_default().to_owned(),
        state: stored.get("state").filter(|s| !s.is_null()).cloned(),
        success: matches!(row.status, AttemptStatus::Executed | AttemptStatus::Confirmed),
        error: row.error_kind.as_ref().map(|kind| tool_core::ToolError {
            kind: serde_json::from_value(Value::String(kind.clone()))
                .unwrap_or(tool_core::ErrorKind::Internal),
            message: row.error.clone().unwrap_or_default(),
        }),
    };
    let hooks = registry().render(&row.tool);
    let card = if row.status == AttemptStatus::Proposed {
        hooks.placeholder(&row.api, &row.arguments)
    } else {
        hooks.result(&row.api, &row.arguments, &output)
    };
    let summary: String = output.content.chars().take(300).collect();
    html! {
        article class={ "call " (row.status.as_str()) } data-key=(row.key) {
            header {
                span class={ "badge " (status_tone(row.status)) } { (row.status.as_str()) }
                " " code { (row.tool) "/" (row.api) }
                " " span class="when" { (ui::time(row.attempted_at)) }
                @if let Some(ms) = row.duration_ms { " · " (ui::duration(ms)) " (" (ms) " ms)" }
                @if let Some(decision) = &row.decision {
                    " · " (decision) @if let Some(by) = &row.decided_by { " by " (by) }
                }
            }
            (ui::card(&card))
            @if !summary.is_empty() && row.status != AttemptStatus::Proposed {
                details { summary { "What the model read" } pre class="content" { (summary) @if output.content.chars().count() > 300 { "…" } } }
            }
            p { a href={ "/console/journal/" (super::url_escape(&row.key)) } { "The whole record" } }
        }
    }
}

fn status_tone(status: AttemptStatus) -> &'static str {
    match status {
        AttemptStatus::Executed | AttemptStatus::Confirmed => "success",
        AttemptStatus::Proposed => "info",
        AttemptStatus::Failed | AttemptStatus::Abandoned => "danger",
        AttemptStatus::Blocked | AttemptStatus::Denied | AttemptStatus::Compensated => "warning",
    }
}

async fn timeline(state: &AppState, tenant: &str, session: &str) -> Result<Markup, Response> {
    let filter =
        AttemptFilter { session_id: Some(session.to_owned()), limit: Some(200), ..AttemptFilter::default() };
    let mut rows = state.journal.query(tenant, &filter).await.map_err(internal)?;
    rows.reverse();
    Ok(html! {
        @if rows.is_empty() { p class="empty" { "No calls yet." } }
        @for row in &rows { (call_markup(row)) }
    })
}

/// `GET /console/sessions/{id}`: one session's calls as cards, updated as they happen.
pub async fn session_page(
    State(state): State<Arc<AppState>>,
    viewer: Viewer,
    Path(id): Path<String>,
) -> Response {
    let tenant = &viewer.principal.tenant;
    let Ok(Some(record)) = state.journal.get_session(tenant, &id).await else {
        let body = ui::notice("error", "No such session (or another tenant's).");
        return (StatusCode::NOT_FOUND, Html(page(Some(&viewer), "Session", "sessions", body).into_string()))
            .into_response();
    };
    let view = serde_json::from_value::<SessionView>(record.config.clone()).ok();
    let calls = match timeline(&state, tenant, &id).await {
        Ok(calls) => calls,
        Err(response) => return response,
    };
    let body = html! {
        dl class="meta" {
            dt { "Session" } dd { code { (record.id) } }
            dt { "Status" } dd { (record.status) }
            dt { "Opened" } dd { (ui::time(record.created_at)) }
            @if let Some(view) = &view {
                dt { "Folder" } dd { code { (view.working_directory.clone().unwrap_or_default()) } }
                dt { "Approval mode" } dd { (view.approval_mode.as_str()) }
                @if let Some(agent) = &view.agent_id { dt { "Agent" } dd { (agent) } }
                @if let Some(key) = &view.created_by { dt { "Opened by" } dd { (key) } }
            }
        }
        section aria-labelledby="calls-title" {
            h2 id="calls-title" { "Calls" }
            div id="timeline" data-session=(record.id) { (calls) }
        }
    };
    Html(page(Some(&viewer), "Session", "sessions", body).into_string()).into_response()
}

/// `GET /console/sessions/{id}/timeline`: the calls' markup (what the script fetches again).
pub async fn timeline_fragment(
    State(state): State<Arc<AppState>>,
    viewer: Viewer,
    Path(id): Path<String>,
) -> Response {
    match timeline(&state, &viewer.principal.tenant, &id).await {
        Ok(markup) => Html(markup.into_string()).into_response(),
        Err(response) => response,
    }
}

#[derive(Debug, Default, Deserialize)]
pub struct JournalQuery {
    #[serde(default)]
    tool: Option<String>,
    #[serde(default)]
    status: Option<String>,
    #[serde(default)]
    decision: Option<String>,
    #[serde(default)]
    session: Option<String>,
    #[serde(default)]
    agent: Option<String>,
    #[serde(default)]
    since: Option<String>,
    #[serde(default)]
    until: Option<String>,
    #[serde(default)]
    after_at: Option<i64>,
    #[serde(default)]
    after_key: Option<String>,
}

/// A `datetime-local` value (`YYYY-MM-DDTHH:MM`, taken as UTC) as Unix milliseconds.
fn parse_time(text: &str) -> Option<i64> {
    let (date, time) = text.trim().split_once('T')?;
    let mut d = date.split('-').map(|p| p.parse::<i64>().ok());
    let (y, m, day) = (d.next()??, d.next()??, d.next()??);
    let mut t = time.split(':').map(|p| p.parse::<i64>().ok());
    let (h, min) = (t.next()??, t.next()??);
    // Days from civil (Howard Hinnant).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some(((days * 86_400) + h * 3600 + min * 60) * 1000)
}

/// `GET /console/journal`: the tenant's calls, filtered, paged by a cursor (the same cost at the
/// millionth row).
pub async fn journal(
    State(state): State<Arc<AppState>>,
    viewer: Viewer,
    Query(query): Query<JournalQuery>,
) -> Response {
    let blank = |v: &Option<String>| v.clone().filter(|v| !v.trim().is_empty());
    let status = blank(&query.status).and_then(|s| AttemptStatus::parse(&s));
    let filter = AttemptFilter {
        session_id: blank(&query.session),
        status,
        tool: blank(&query.tool),
        decision: blank(&query.decision),
        agent_id: blank(&query.agent),
        since: blank(&query.since).and_then(|s| parse_time(&s)),
        until: blank(&query.until).and_then(|s| parse_time(&s)),
        after: query.after_at.zip(query.after_key.clone()),
        limit: Some(LIST_PAGE),
    };
    let rows = match state.journal.query(&viewer.principal.tenant, &filter).await {
        Ok(rows) => rows,
        Err(error) => return internal(error),
    };
    let keep = |name: &str, value: &Option<String>| {
        blank(value).map(|v| format!("{name}={}&", super::url_escape(&v))).unwrap_or_default()
    };
    let carried = [
        keep("tool", &query.tool),
        keep("status", &query.status),
        keep("decision", &query.decision),
        keep("session", &query.session),
        keep("agent", &query.agent),
        keep("since", &query.since),
        keep("until", &query.until),
    ]
    .concat();
    let next =
        rows.last().filter(|_| rows.len() == LIST_PAGE as usize).map(|r| (r.attempted_at, r.key.clone()));
    let value = |v: &Option<String>| v.clone().unwrap_or_default();
    let body = html! {
        form class="filters" method="get" action="/console/journal" role="search" {
            label { "Tool " input name="tool" value=(value(&query.tool)); }
            label { "Status "
                select name="status" {
                    option value="" { "any" }
                    @for s in ["proposed", "executed", "confirmed", "compensated", "failed", "blocked", "denied", "abandoned"] {
                        option value=(s) selected[query.status.as_deref() == Some(s)] { (s) }
                    }
                }
            }
            label { "Decision " input name="decision" value=(value(&query.decision)) placeholder="allow_once, deny…"; }
            label { "Session " input name="session" value=(value(&query.session)); }
            label { "Client " input name="agent" value=(value(&query.agent)) placeholder="agent id"; }
            label { "From (UTC) " input type="datetime-local" name="since" value=(value(&query.since)); }
            label { "To (UTC) " input type="datetime-local" name="until" value=(value(&query.until)); }
            button type="submit" { "Filter" }
        }
        div class="table" {
            table {
                thead { tr { th { "When" } th { "Call" } th { "Status" } th { "Decision" } th { "Who decided" } th { "Session" } th { "Time" } } }
                tbody {
                    @for row in &rows {
                        tr {
                            td { a href={ "/console/journal/" (super::url_escape(&row.key)) } { (ui::time(row.attempted_at)) } }
                            td { code { (row.tool) "/" (row.api) } }
                            td { span class={ "badge " (status_tone(row.status)) } { (row.status.as_str()) } }
                            td { (row.decision.clone().unwrap_or_default()) }
                            td { (row.decided_by.clone().unwrap_or_default()) }
                            td { a href={ "/console/sessions/" (row.session_id) } { code { (row.session_id) } } }
                            td { (row.duration_ms.map(|ms| format!("{ms} ms")).unwrap_or_default()) }
                        }
                    }
                }
            }
        }
        @if rows.is_empty() { p class="empty" { "No calls match." } }
        @if let Some((at, key)) = next {
            nav class="pages" { a href={ "/console/journal?" (carried) "after_at=" (at) "&after_key=" (super::url_escape(&key)) } { "Older" } }
        }
    };
    Html(page(Some(&viewer), "Journal", "journal", body).into_string()).into_response()
}

/// `GET /console/journal/{key}`: one call's whole record (redacted as everywhere: the journal
/// holds no credential).
pub async fn record(State(state): State<Arc<AppState>>, viewer: Viewer, Path(key): Path<String>) -> Response {
    let Ok(Some(row)) = state.journal.get(&viewer.principal.tenant, &key).await else {
        let body = ui::notice("error", "No such call (or another tenant's).");
        return (StatusCode::NOT_FOUND, Html(page(Some(&viewer), "Call", "journal", body).into_string()))
            .into_response();
    };
    let stored = row.result.clone().unwrap_or(Value::Null);
    let body = html! {
        dl class="meta" {
            dt { "Key" } dd { code { (row.key) } }
            dt { "Call" } dd { code { (row.call_id) } " — " code { (row.function_name) } " → " code { (row.tool) "/" (row.api) } }
            dt { "Session" } dd { a href={ "/console/sessions/" (row.session_id) } { code { (row.session_id) } } }
            @if let Some(parent) = &row.parent_call_id { dt { "Within" } dd { code { (parent) } } }
            dt { "Status" } dd { span class={ "badge " (status_tone(row.status)) } { (row.status.as_str()) } }
            dt { "Tier" } dd { (row.tier.clone().unwrap_or_default()) }
            dt { "Decision" } dd { (row.decision.clone().unwrap_or_default()) @if let Some(by) = &row.decided_by { " by " (by) } }
            dt { "Proposed" } dd { (ui::time(row.attempted_at)) }
            dt { "Last change" } dd { (ui::time(row.updated_at)) }
            @if let Some(ms) = row.duration_ms { dt { "Took" } dd { (ms) " ms" } }
            @if let Some(code) = row.exit_status { dt { "Exit status" } dd { (code) } }
            @if let Some(kind) = &row.error_kind { dt { "Error" } dd { (kind) ": " (row.error.clone().unwrap_or_default()) } }
            dt { "Instance" } dd { code { (row.instance_id) } }
        }
        h2 { "Arguments" } (ui::json(&row.arguments))
        h2 { "What the model read" }
        pre class="content" { (stored.get("content").and_then(Value::as_str).unwrap_or_default()) }
        @if let Some(state_value) = stored.get("state").filter(|s| !s.is_null()) {
            h2 { "State (for people)" } (ui::json(state_value))
        }
    };
    Html(page(Some(&viewer), "Call", "journal", body).into_string()).into_response()
}

/// `GET /console/rules`: the tenant's remembered decisions, with who made them.
pub async fn rules(State(state): State<Arc<AppState>>, viewer: Viewer) -> Response {
    let rules = match state.journal.remembered(&viewer.principal.tenant, None).await {
        Ok(rules) => rules,
        Err(error) => return internal(error),
    };
    let decides = viewer.decides(&state);
    let body = html! {
        div class="table" {
            table {
                thead { tr { th { "Rule" } th { "Project" } th { "Made by" } th { "When" } th { span class="visually-hidden" { "Revoke" } } } }
                tbody {
                    @for rule in &rules {
                        tr data-rule=(rule.id) {
                            td {
                                code { (rule.tool) "/" (rule.api) }
                                " " (rule_scope(&state, rule))
                            }
                            td { code { (rule.project) } }
                            td { (rule.created_by.clone().unwrap_or_default()) }
                            td { (ui::time(rule.created_at)) }
                            td {
                                @if decides {
                                    form method="post" action={ "/console/rules/" (rule.id) "/revoke" } {
                                        input type="hidden" name="csrf" value=(viewer.csrf);
                                        button type="submit" { "Revoke" }
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
        @if rules.is_empty() { p class="empty" { "No remembered decisions: every call asks as its policy says." } }
    };
    Html(page(Some(&viewer), "Rules", "rules", body).into_string()).into_response()
}

/// `POST /console/rules/{id}/revoke`.
pub async fn revoke(
    State(state): State<Arc<AppState>>,
    viewer: Viewer,
    headers: HeaderMap,
    Path(id): Path<String>,
    axum::Form(form): axum::Form<CsrfForm>,
) -> Response {
    if !super::same_origin(&headers) {
        return refused(StatusCode::FORBIDDEN, "revoke from the console's own page");
    }
    if let Err(refusal) = viewer.check(csrf(&headers, form.csrf.as_deref())) {
        return refusal;
    }
    if let Err(error) = viewer.principal.must_decide(state.args.agent_keys_decide) {
        return refused(error.status(), error.message());
    }
    match state.journal.revoke(&viewer.principal.tenant, &id).await {
        Ok(true) => {
            tracing::info!(event = "rule.revoked", tenant = %viewer.principal.tenant, rule = %id, by = %format!("{} via console", viewer.principal.id), "an \"always allow\" rule was revoked");
            Redirect::to("/console/rules").into_response()
        }
        Ok(false) => refused(StatusCode::NOT_FOUND, "no such rule"),
        Err(error) => internal(error),
    }
}

/// `GET /console/operator`: tenants, keys, instances, health (an operator's key).
pub async fn operator(State(state): State<Arc<AppState>>, viewer: Viewer) -> Response {
    if !viewer.operates() {
        let body = ui::notice(
            "error",
            "The operator's pages take an operator key (`toolhost-server new-key --role operator`).",
        );
        return (
            StatusCode::FORBIDDEN,
            Html(page(Some(&viewer), "Operator", "operator", body).into_string()),
        )
            .into_response();
    }
    let instances = state.journal.instances().await.unwrap_or_default();
    let checks = crate::ready::check(&state).await;
    let keys = state.keys.entries();
    let last_used = state.key_uses();
    let now = now_ms();
    let body = html! {
        section aria-labelledby="health-title" {
            h2 id="health-title" { "Health" }
            dl class="meta" {
                @for check in &checks {
                    dt { (check.part) }
                    dd { span class={ "badge " (if check.ok { "success" } else { "danger" }) } { (if check.ok { "ok" } else { "failing" }) } " " (check.detail) " (" (check.took_ms) " ms)" }
                }
                dt { "Events" } dd { (state.bus.transport().as_str()) }
                dt { "Journal writes waiting" } dd { (state.executor.outbox().len()) }
            }
            p { "Metrics: " code { "/metrics" } " with an operator key" @if let Some(address) = state.args.metrics_listen { ", or without one at " code { "http://" (address) "/metrics" } } "." }
        }
        section aria-labelledby="instances-title" {
            h2 id="instances-title" { "Instances" }
            div class="table" {
                table {
                    thead { tr { th { "Instance" } th { "Version" } th { "Address" } th { "Host" } th { "Started" } th { "Last heartbeat" } th { "Calls in flight" } } }
                    tbody {
                        @for instance in &instances {
                            tr {
                                td { code { (instance.id) } @if instance.id == state.instance_id { " " span class="badge info" { "this one" } } }
                                td { (instance.version.clone().unwrap_or_default()) }
                                td { code { (instance.address.clone().unwrap_or_default()) } }
                                td { (instance.host) " (pid " (instance.pid) ")" }
                                td { (ui::time(instance.started_at)) }
                                td { (ui::duration(now - instance.heartbeat_at)) " ago" }
                                td { (instance.in_flight.map(|n| n.to_string()).unwrap_or_default()) }
                            }
                        }
                    }
                }
            }
        }
        section aria-labelledby="keys-title" {
            h2 id="keys-title" { "Tenants and keys" }
            @if state.keys.is_open() { p { "No keys: an open server, one person's, on loopback only." } }
            div class="table" {
                table {
                    thead { tr { th { "Tenant" } th { "Key" } th { "Role" } th { "Last used here" } } }
                    tbody {
                        @for (tenant, role, name) in &keys {
                            @let id = format!("{tenant}/{}/{name}", role.as_str());
                            tr {
                                td { (tenant) }
                                td { code { (name) } }
                                td { (role.as_str()) }
                                td { (last_used.get(&id).map(|at| ui::utc(*at)).unwrap_or_else(|| "not since this instance started".into())) }
                            }
                        }
                    }
                }
            }
            p class="hint" { "Keys are shown by name: never a value or a digest. They reload on SIGHUP and when the keys file changes." }
        }
    };
    Html(page(Some(&viewer), "Operator", "operator", body).into_string()).into_response()
}

// ---------------------------------------------------------------- live

#[derive(Debug, Deserialize)]
pub struct EventsQuery {
    #[serde(default)]
    session: Option<String>,
}

fn sse(kind: &str, data: &Value) -> SseEvent {
    SseEvent::default().event(kind).data(data.to_string())
}

/// `GET /console/events`: the tenant's events from every instance, as the page uses them.
pub async fn events(
    State(state): State<Arc<AppState>>,
    viewer: Viewer,
    Query(query): Query<EventsQuery>,
) -> Response {
    let tenant = viewer.principal.tenant.clone();
    let slot = match state.limits.take(&tenant, crate::limits::Resource::Streams) {
        Ok(slot) => slot,
        Err(error) => return refused(error.status(), error.message()),
    };
    let mut events = state.bus.subscribe(&tenant);
    let shutdown = state.shutdown.clone();
    let (sender, receiver) = tokio::sync::mpsc::channel::<SseEvent>(64);
    let watched_session = query.session;
    tokio::spawn(async move {
        let _slot = slot;
        loop {
            let event = tokio::select! {
                event = events.recv() => event,
                () = shutdown.cancelled() => {
                    let _ = sender.send(sse("shutdown", &json!({}))).await;
                    return;
                }
                () = sender.closed() => return,
            };
            let event = match event {
                Ok(event) => event,
                Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {
                    // Missed some: the page reloads what it shows.
                    if sender.send(sse("stale", &json!({}))).await.is_err() {
                        return;
                    }
                    continue;
                }
                Err(_) => return,
            };
            let session = event.session_id.clone();
            let mut out: Vec<SseEvent> = Vec::new();
            match &event.event {
                Event::PermissionRequested { approval_id, .. } | Event::QuestionAsked { approval_id, .. } => {
                    if let Ok(Some(row)) = state.journal.get_approval(&tenant, approval_id).await
                        && row.status == "pending"
                    {
                        let item = item(&state, row).await;
                        let html = item_markup(&state, &viewer, &item, false).into_string();
                        out.push(sse("approval", &json!({"id": approval_id, "html": html})));
                    }
                }
                Event::PermissionGranted { approval_id: Some(id), call_id, .. }
                | Event::PermissionDenied { approval_id: Some(id), call_id, .. }
                | Event::QuestionSettled { approval_id: id, call_id, .. } => {
                    let row = state.journal.get_approval(&tenant, id).await.ok().flatten();
                    let html = row.as_ref().map(|row| decided_markup(row).into_string());
                    out.push(sse(
                        "decided",
                        &json!({"id": id, "session": session, "call": call_id, "html": html}),
                    ));
                }
                Event::Finished { call_id, .. }
                | Event::Failed { call_id, .. }
                | Event::Blocked { call_id, .. } => {
                    out.push(sse("ended", &json!({"session": session, "call": call_id})));
                }
                _ => {}
            }
            if watched_session.as_deref() == Some(session.as_str()) {
                out.push(sse("session", &json!({"session": session})));
            }
            for item in out {
                if sender.send(item).await.is_err() {
                    return;
                }
            }
        }
    });
    let stream = futures::stream::unfold(receiver, |mut receiver| async move {
        receiver.recv().await.map(|event| (Ok::<_, Infallible>(event), receiver))
    });
    Sse::new(stream).keep_alive(KeepAlive::default()).into_response()
}

#[cfg(test)]
mod tests {
    #[test]
    fn local_times_are_read_as_utc() {
        assert_eq!(super::parse_time("2026-12-07T00:00"), Some(1_796_601_600_000));
        assert_eq!(super::parse_time("2000-02-29T12:30"), Some(951_827_400_000));
        assert_eq!(super::parse_time("yesterday"), None);
    }
}
