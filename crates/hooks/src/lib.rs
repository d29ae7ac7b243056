//! A person's or operator's own programs around each call and each turn, with the configuration
//! shape and protocol of Claude Code's hooks, so the scripts teams already share work unchanged.
//!
//! - **Events**: `PreToolUse`, `PermissionRequest`, `PostToolUse` (run by the pipeline through
//!   [`tool_executor::CallHooks`]); `UserPromptSubmit`, `SessionStart`, `Stop` (run by an agent
//!   loop through [`Hooks::user_prompt_submit`], [`Hooks::session_start`], [`Hooks::stop`]).
//! - **Protocol**: the event as JSON on standard input (`session_id`, `cwd`, `hook_event_name`,
//!   `permission_mode`, `tool_name`, `tool_input`, `tool_use_id`, `tool_response`, `prompt`…).
//!   Exit 0: standard output, if it is a JSON object, is read as decisions
//!   (`hookSpecificOutput.permissionDecision` allow / deny / ask with a reason, `updatedInput`,
//!   `additionalContext`, `decision: "block"` with a `reason`, `continue: false`,
//!   `systemMessage`); plain text is context for the model on `UserPromptSubmit` and
//!   `SessionStart`. Exit 2 blocks, with standard error as the reason. Anything else is a
//!   failure.
//! - **Failures** (another exit code, a timeout, a hook that cannot start or was killed) are
//!   reported to the person, never silent; what the hook guarded goes on, as in Claude Code
//!   (scripts end in `… && exit 2`, whose status is 1 when nothing matched), unless the hook says
//!   `"onFailure": "block"`: then its failure blocks.
//! - Commands run with `sh -c` in the session's folder, outside the model's sandbox but with the
//!   command environment's secret filter, in their own process group, killed at their timeout.
//! - Claude Code's tool names (`Bash`, `Read`, `Edit`, `MultiEdit`, `Write`, `Grep`, `Glob`) and
//!   input fields (`command`, `file_path`, `old_string`…) are what hooks see for the file and
//!   command tools ([`names`]); matchers also match our function and API names.
#![deny(missing_docs)]

pub mod config;
pub mod matcher;
pub mod names;
pub mod run;

use std::path::{Path, PathBuf};
#[cfg(feature = "http")]
use std::sync::Arc;

use async_trait::async_trait;
use serde_json::{Map, Value, json};
use tool_core::ToolOutput;
use tool_executor::{ApprovalMode, CallHooks, HookAnswer, HookDecision, HookNote, HookedCall};

pub use config::{Action, ConfigError, Hook, HookSet, OnFailure, Origin};

/// The most of one hook's context the model is given (Claude Code's cap).
pub const MAX_CONTEXT_CHARS: usize = 10_000;

/// The most of one note people are shown.
const MAX_NOTE_CHARS: usize = 600;

fn cut(text: &str, max: usize) -> String {
    let text = text.trim();
    match text.char_indices().nth(max) {
        Some((at, _)) => format!("{}… [cut]", &text[..at]),
        None => text.to_owned(),
    }
}

/// Where and for whom a hook runs.
#[derive(Debug, Clone, Default)]
pub struct Place {
    /// The session id.
    pub session_id: String,
    /// The folder the session works in (the hook's working folder and `cwd`).
    pub cwd: Option<PathBuf>,
    /// The approval mode (sent as Claude Code's `permission_mode`).
    pub mode: ApprovalMode,
}

impl Place {
    /// Where a call of `config`'s session runs.
    pub fn of(config: &tool_executor::SessionConfig) -> Self {
        Self {
            session_id: config.id.clone(),
            cwd: config.working_directory.clone(),
            mode: config.policy.mode,
        }
    }
}

/// What turn hooks (`UserPromptSubmit`, `SessionStart`, `Stop`) said.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TurnAnswer {
    /// A hook blocked (the prompt is not sent; for `Stop`: the agent must go on), with the hook
    /// (`hook:NAME`) and its reason.
    pub block: Option<(String, String)>,
    /// Text for the model.
    pub context: Vec<String>,
    /// What people are told.
    pub notes: Vec<HookNote>,
}

/// What one hook's run said, before the event gives it meaning.
enum Said {
    /// Exit 0 and nothing to read.
    Nothing,
    /// Exit 0 and plain text.
    Text(String),
    /// Exit 0 and a JSON object.
    Json(Map<String, Value>),
    /// Exit 2, with standard error.
    Blocking(String),
    /// Anything else, and why.
    Failed(String),
}

fn said_of(ran: run::Ran) -> Said {
    match ran.exit {
        run::Exit::Code(0) => {
            let out = ran.stdout.trim();
            if out.is_empty() {
                Said::Nothing
            } else if out.starts_with('{') {
                match serde_json::from_str::<Value>(out) {
                    Ok(Value::Object(object)) => Said::Json(object),
                    _ => Said::Failed(format!(
                        "printed something that is not a JSON object: {}",
                        cut(out, 200)
                    )),
                }
            } else {
                Said::Text(out.to_owned())
            }
        }
        run::Exit::Code(2) => {
            let reason = ran.stderr.trim();
            Said::Blocking(if reason.is_empty() {
                "no reason given".into()
            } else {
                cut(reason, MAX_CONTEXT_CHARS)
            })
        }
        run::Exit::Code(code) => {
            let detail = ran.stderr.trim();
            Said::Failed(if detail.is_empty() {
                format!("exited with {code}")
            } else {
                format!("exited with {code}: {}", cut(detail, 300))
            })
        }
        run::Exit::Failed(why) => Said::Failed(why),
    }
}

/// A decision's strength when several hooks decide: deny over ask over allow.
fn rank(decision: Option<HookDecision>) -> u8 {
    match decision {
        None => 0,
        Some(HookDecision::Allow) => 1,
        Some(HookDecision::Ask) => 2,
        Some(HookDecision::Deny) => 3,
    }
}

/// One hook's part of an answer.
#[derive(Default)]
struct Part {
    decision: Option<HookDecision>,
    reason: Option<String>,
    updated_input: Option<Value>,
    context: Vec<String>,
    notes: Vec<String>,
}

fn text_at<'a>(object: &'a Map<String, Value>, path: &[&str]) -> Option<&'a str> {
    let mut value = object.get(path[0])?;
    for key in &path[1..] {
        value = value.get(key)?;
    }
    value.as_str()
}

/// The hooks of a session (or of a folder, a person, an operator).
pub struct Hooks {
    hooks: Vec<(Hook, matcher::Matcher)>,
    warnings: Vec<String>,
    env: Vec<(String, String)>,
    /// Where a person decides an approval (`{id}` replaced), for `PermissionRequest` hooks.
    approval_url: Option<String>,
    #[cfg(feature = "http")]
    fetcher: Option<Arc<safe_fetch::Fetcher>>,
}

impl std::fmt::Debug for Hooks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hooks").field("hooks", &self.hooks.len()).finish_non_exhaustive()
    }
}

impl Hooks {
    /// The hooks of `set`; commands inherit this process's environment through the command
    /// environment's secret filter.
    pub fn new(set: HookSet) -> Self {
        // Not `std::env::vars`, which panics on a variable that is not UTF-8.
        let env = computer_runtime::env::EnvPolicy::default().filter(
            std::env::vars_os().filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?))),
        );
        Self {
            hooks: set
                .hooks
                .into_iter()
                .map(|hook| {
                    let matcher = matcher::Matcher::new(&hook.matcher);
                    (hook, matcher)
                })
                .collect(),
            warnings: set.warnings,
            env,
            approval_url: None,
            #[cfg(feature = "http")]
            fetcher: None,
        }
    }

    /// `PermissionRequest` hooks are told where a person decides the approval: `template` with
    /// `{id}` replaced by its id (the server's console, `https://…/console/approvals/{id}`).
    #[must_use]
    pub fn with_approval_url(mut self, template: impl Into<String>) -> Self {
        self.approval_url = Some(template.into());
        self
    }

    /// Webhooks go through `fetcher` (without one they fail, and are reported).
    #[cfg(feature = "http")]
    #[must_use]
    pub fn with_fetcher(mut self, fetcher: Arc<safe_fetch::Fetcher>) -> Self {
        self.fetcher = Some(fetcher);
        self
    }

    /// The hooks.
    pub fn hooks(&self) -> impl Iterator<Item = &Hook> {
        self.hooks.iter().map(|(hook, _)| hook)
    }

    /// What was left out of the configuration, and why.
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.hooks.is_empty()
    }

    /// Whether any hook runs on `event` (for tool events: for a call with these names).
    pub fn has(&self, event: &str, names: Option<&[&str]>) -> bool {
        self.selected(event, names).next().is_some()
    }

    fn selected<'a>(
        &'a self,
        event: &'a str,
        names: Option<&'a [&'a str]>,
    ) -> impl Iterator<Item = &'a Hook> + 'a {
        let mut seen: Vec<&Action> = Vec::new();
        self.hooks
            .iter()
            .filter(move |(hook, matcher)| {
                hook.event == event
                    && match names {
                        Some(names) => matcher.matches_any(names.iter().copied()),
                        None => true,
                    }
            })
            .map(|(hook, _)| hook)
            // The same command twice on one event runs once (as in Claude Code).
            .filter(move |hook| {
                if seen.contains(&&hook.action) {
                    false
                } else {
                    seen.push(&hook.action);
                    true
                }
            })
    }

    /// Runs every hook of `event` that matches, at once; their answers in configuration order.
    async fn run_all<'a>(
        &'a self,
        event: &'a str,
        names: Option<&'a [&'a str]>,
        place: &Place,
        input: Value,
    ) -> Vec<(&'a Hook, Said)> {
        let body = serde_json::to_vec(&input).unwrap_or_default();
        let selected: Vec<&Hook> = self.selected(event, names).collect();
        let runs = selected.iter().map(|hook| self.run_one(hook, place, &body));
        let results = futures::future::join_all(runs).await;
        selected.into_iter().zip(results.into_iter().map(said_of)).collect()
    }

    async fn run_one(&self, hook: &Hook, place: &Place, body: &[u8]) -> run::Ran {
        match &hook.action {
            Action::Command(command) => {
                let mut env = self.env.clone();
                if let Some(cwd) = &place.cwd {
                    let dir = cwd.display().to_string();
                    env.push(("CLAUDE_PROJECT_DIR".into(), dir.clone()));
                    env.push(("TOOLHOST_PROJECT_DIR".into(), dir));
                }
                env.push(("TOOLHOST_SESSION_ID".into(), place.session_id.clone()));
                run::command(command, body, place.cwd.as_deref(), &env, hook.timeout).await
            }
            #[cfg(feature = "http")]
            Action::Http { url, headers } => match &self.fetcher {
                Some(fetcher) => run::http(fetcher, url, headers, body.to_vec(), hook.timeout).await,
                None => run::Ran {
                    exit: run::Exit::Failed("is a webhook, and webhooks are not available here".into()),
                    stdout: String::new(),
                    stderr: String::new(),
                },
            },
            #[cfg(not(feature = "http"))]
            Action::Http { .. } => run::Ran {
                exit: run::Exit::Failed("is a webhook, and webhooks are not available here".into()),
                stdout: String::new(),
                stderr: String::new(),
            },
        }
    }

    fn common(event: &str, place: &Place) -> Map<String, Value> {
        let mode = match place.mode {
            ApprovalMode::Manual | ApprovalMode::AllowList => "default",
            ApprovalMode::AutoRun => "acceptEdits",
            ApprovalMode::Headless => "dontAsk",
            ApprovalMode::ReadOnly => "plan",
        };
        let mut input = Map::new();
        input.insert("session_id".into(), json!(place.session_id));
        input.insert("cwd".into(), json!(place.cwd.as_ref().map(|c| c.display().to_string())));
        input.insert("hook_event_name".into(), json!(event));
        input.insert("permission_mode".into(), json!(mode));
        input.insert("toolhost_mode".into(), json!(place.mode.as_str()));
        input
    }

    fn call_input(event: &str, call: &HookedCall<'_>) -> (Map<String, Value>, String) {
        let place = Place::of(call.session);
        let mut input = Self::common(event, &place);
        let tool_name = names::claude_name(call.tool, call.api, call.arguments)
            .map_or_else(|| call.function.to_owned(), std::borrow::Cow::into_owned);
        input.insert("tool_name".into(), json!(tool_name));
        let mut tool_input = names::to_claude(call.tool, call.api, call.arguments);
        // Claude Code sends a file's path absolute: scripts compare it with their own paths.
        if let (Some(cwd), Some(Value::String(path))) = (&place.cwd, tool_input.get_mut("file_path"))
            && std::path::Path::new(path.as_str()).is_relative()
        {
            *path = cwd.join(path.as_str()).display().to_string();
        }
        input.insert("tool_input".into(), tool_input);
        input.insert("tool_use_id".into(), json!(call.call_id));
        input.insert(
            "toolhost".into(),
            json!({"tool": call.tool, "api": call.api, "function": call.function, "arguments": call.arguments}),
        );
        (input, tool_name)
    }

    /// Runs a tool event and folds what each hook said into one answer.
    async fn call_event(
        &self,
        event: &str,
        call: &HookedCall<'_>,
        extra: impl FnOnce(&mut Map<String, Value>),
        fold: impl Fn(&Hook, Said) -> Part,
    ) -> HookAnswer {
        let (mut input, tool_name) = Self::call_input(event, call);
        extra(&mut input);
        let names = [tool_name.as_str(), call.function, call.api];
        let place = Place::of(call.session);
        let mut answer = HookAnswer::default();
        let mut rewritten_by: Option<String> = None;
        for (hook, said) in self.run_all(event, Some(&names), &place, Value::Object(input)).await {
            let label = hook.label();
            let part = fold(hook, said);
            answer
                .notes
                .extend(part.notes.into_iter().map(|message| HookNote { hook: label.clone(), message }));
            answer.context.extend(part.context.into_iter().map(|c| cut(&c, MAX_CONTEXT_CHARS)));
            if rank(part.decision) > rank(answer.decision) {
                answer.decision = part.decision;
                answer.decided_by = Some(label.clone());
                answer.reason = part.reason.map(|r| cut(&r, MAX_CONTEXT_CHARS));
            }
            if let Some(updated) = part.updated_input {
                let updated = names::from_claude(call.tool, call.api, call.arguments, &updated);
                match (&answer.updated_input, &rewritten_by) {
                    (None, _) => {
                        answer.updated_input = Some(updated);
                        rewritten_by = Some(label);
                    }
                    (Some(first), Some(by)) if *first != updated => answer.notes.push(HookNote {
                        hook: label,
                        message: format!("its new input was not used: {by} rewrote the call first"),
                    }),
                    _ => {}
                }
            }
        }
        // A rewrite goes with an allow only from the hook that rewrote: another hook allowed the
        // input it saw, not the rewritten one. A denied call is not run rewritten either.
        match answer.decision {
            Some(HookDecision::Deny) => answer.updated_input = None,
            Some(HookDecision::Allow)
                if answer.decided_by != rewritten_by && answer.updated_input.is_some() =>
            {
                answer.notes.push(HookNote {
                    hook: answer.decided_by.clone().unwrap_or_default(),
                    message: format!(
                        "its allow was for the call as the model made it; a person decides on the input {} rewrote",
                        rewritten_by.as_deref().unwrap_or("another hook")
                    ),
                });
                answer.decision = None;
                answer.decided_by = None;
                answer.reason = None;
            }
            _ => {}
        }
        answer
    }

    /// `UserPromptSubmit`: before the person's prompt goes to the model.
    pub async fn user_prompt_submit(&self, place: &Place, prompt: &str) -> TurnAnswer {
        let mut input = Self::common("UserPromptSubmit", place);
        input.insert("prompt".into(), json!(prompt));
        self.turn_event("UserPromptSubmit", None, place, input, true).await
    }

    /// `SessionStart`: a session starts (`source`: `startup`, `resume`, `clear` or `compact`).
    pub async fn session_start(&self, place: &Place, source: &str) -> TurnAnswer {
        let mut input = Self::common("SessionStart", place);
        input.insert("source".into(), json!(source));
        // Its matchers match the source, as in Claude Code.
        let mut answer = self.turn_event("SessionStart", Some(&[source]), place, input, true).await;
        // A session's start cannot be refused: what a hook said is shown to the person.
        if let Some((hook, reason)) = answer.block.take() {
            answer.notes.push(HookNote { hook, message: reason });
        }
        answer
    }

    /// `Stop`: the model gave its answer (`again`: a `Stop` hook already made it go on once in
    /// this turn — Claude Code's `stop_hook_active`). `block` is the reason to go on.
    pub async fn stop(&self, place: &Place, again: bool, answer: &str) -> TurnAnswer {
        let mut input = Self::common("Stop", place);
        input.insert("stop_hook_active".into(), json!(again));
        input.insert("last_assistant_message".into(), json!(answer));
        self.turn_event("Stop", None, place, input, false).await
    }

    async fn turn_event(
        &self,
        event: &str,
        names: Option<&[&str]>,
        place: &Place,
        input: Map<String, Value>,
        text_is_context: bool,
    ) -> TurnAnswer {
        let mut answer = TurnAnswer::default();
        for (hook, said) in self.run_all(event, names, place, Value::Object(input)).await {
            let label = hook.label();
            let mut note = |message: String| {
                answer.notes.push(HookNote { hook: label.clone(), message: cut(&message, MAX_NOTE_CHARS) });
            };
            let mut block: Option<String> = None;
            match said {
                Said::Nothing => {}
                Said::Text(text) if text_is_context => answer.context.push(cut(&text, MAX_CONTEXT_CHARS)),
                Said::Text(_) => {}
                Said::Blocking(reason) => block = Some(reason),
                Said::Failed(why) => {
                    // A failed `Stop` hook never keeps the agent going.
                    if hook.on_failure() == OnFailure::Block && event != "Stop" {
                        block = Some(format!("the hook {label} failed ({why})"));
                    }
                    note(format!("failed: {why}"));
                }
                Said::Json(object) => {
                    if let Some(message) = text_at(&object, &["systemMessage"]) {
                        note(message.to_owned());
                    }
                    if let Some(context) = text_at(&object, &["hookSpecificOutput", "additionalContext"]) {
                        answer.context.push(cut(context, MAX_CONTEXT_CHARS));
                    }
                    let stop_all = object.get("continue") == Some(&Value::Bool(false));
                    if stop_all && event != "Stop" {
                        block =
                            Some(text_at(&object, &["stopReason"]).unwrap_or("a hook stopped it").to_owned());
                    } else if !stop_all && text_at(&object, &["decision"]) == Some("block") {
                        block = Some(text_at(&object, &["reason"]).unwrap_or("no reason given").to_owned());
                    }
                }
            }
            if let Some(reason) = block
                && answer.block.is_none()
            {
                answer.block = Some((label, cut(&reason, MAX_CONTEXT_CHARS)));
            }
        }
        answer
    }
}

/// How a failed hook's part reads at a tool event.
fn failed_part(hook: &Hook, why: &str, blocks: impl FnOnce(String) -> Part) -> Part {
    let note = format!("failed: {why}");
    if hook.on_failure() == OnFailure::Block {
        let mut part = blocks(format!(
            "the hook {} failed ({why}); it guards this call, so the call was not run",
            hook.label()
        ));
        part.notes.push(note);
        part
    } else {
        Part { notes: vec![note], ..Part::default() }
    }
}

fn system_message(object: &Map<String, Value>, part: &mut Part) {
    if let Some(message) = text_at(object, &["systemMessage"]) {
        part.notes.push(cut(message, MAX_NOTE_CHARS));
    }
}

/// The person's message, and `continue: false` (which denies a call); true when it stopped.
fn stopped(object: &Map<String, Value>, part: &mut Part) -> bool {
    system_message(object, part);
    if object.get("continue") == Some(&Value::Bool(false)) {
        part.decision = Some(HookDecision::Deny);
        part.reason = Some(text_at(object, &["stopReason"]).unwrap_or("a hook stopped the work").to_owned());
        return true;
    }
    false
}

fn deny(reason: String) -> Part {
    Part { decision: Some(HookDecision::Deny), reason: Some(reason), ..Part::default() }
}

/// What a guard (`PreToolUse`, `PermissionRequest`) said: exit 2 and failures deny (a failure
/// only when the hook fails closed), and `read` reads its JSON answer (`Err`: not the protocol).
fn fold_guard(
    hook: &Hook,
    said: Said,
    read: impl FnOnce(&Map<String, Value>, Part) -> Result<Part, String>,
) -> Part {
    match said {
        Said::Nothing | Said::Text(_) => Part::default(),
        Said::Blocking(reason) => deny(reason),
        Said::Failed(why) => failed_part(hook, &why, deny),
        Said::Json(object) => {
            let mut part = Part::default();
            if stopped(&object, &mut part) {
                return part;
            }
            read(&object, part).unwrap_or_else(|why| failed_part(hook, &why, deny))
        }
    }
}

fn fold_pre_tool_use(hook: &Hook, said: Said) -> Part {
    fold_guard(hook, said, |object, mut part| {
        let specific = object.get("hookSpecificOutput").and_then(Value::as_object);
        let decision = specific.and_then(|s| s.get("permissionDecision")).and_then(Value::as_str);
        let reason = specific.and_then(|s| s.get("permissionDecisionReason")).and_then(Value::as_str);
        // The older shape: `decision` approve / block with `reason`.
        let (decision, reason) = match (decision, text_at(object, &["decision"])) {
            (Some(decision), _) => (Some(decision), reason),
            (None, Some("approve")) => (Some("allow"), text_at(object, &["reason"])),
            (None, Some("block")) => (Some("deny"), text_at(object, &["reason"])),
            (None, _) => (None, None),
        };
        part.decision = match decision {
            None => None,
            Some("allow") => Some(HookDecision::Allow),
            Some("deny") => Some(HookDecision::Deny),
            Some("ask") => Some(HookDecision::Ask),
            Some(other) => return Err(format!("answered an unknown permissionDecision `{other}`")),
        };
        part.reason = reason.map(str::to_owned);
        if let Some(updated) = specific.and_then(|s| s.get("updatedInput")) {
            if !updated.is_object() {
                return Err("answered an updatedInput that is not an object".into());
            }
            part.updated_input = Some(updated.clone());
        }
        if let Some(context) = specific.and_then(|s| s.get("additionalContext")).and_then(Value::as_str) {
            part.context.push(context.to_owned());
        }
        Ok(part)
    })
}

fn fold_permission_request(hook: &Hook, said: Said) -> Part {
    fold_guard(hook, said, |object, mut part| {
        let Some(decision) = object.get("hookSpecificOutput").and_then(|s| s.get("decision")) else {
            return Ok(part);
        };
        match decision.get("behavior").and_then(Value::as_str) {
            Some("allow") => {
                part.decision = Some(HookDecision::Allow);
                match decision.get("updatedInput") {
                    None | Some(Value::Null) => {}
                    Some(updated) if updated.is_object() => part.updated_input = Some(updated.clone()),
                    Some(_) => return Err("answered an updatedInput that is not an object".into()),
                }
            }
            Some("deny") => {
                part.decision = Some(HookDecision::Deny);
                part.reason = decision.get("message").and_then(Value::as_str).map(str::to_owned);
            }
            Some("ask") | None => {}
            Some(other) => return Err(format!("answered an unknown behavior `{other}`")),
        }
        Ok(part)
    })
}

fn fold_post_tool_use(hook: &Hook, said: Said) -> Part {
    let tell = |reason: String| Part { context: vec![reason], ..Part::default() };
    match said {
        Said::Nothing | Said::Text(_) => Part::default(),
        Said::Blocking(reason) => tell(reason),
        Said::Failed(why) => failed_part(hook, &why, tell),
        Said::Json(object) => {
            let mut part = Part::default();
            system_message(&object, &mut part);
            if text_at(&object, &["decision"]) == Some("block") {
                part.decision = Some(HookDecision::Deny);
                part.reason =
                    Some(text_at(&object, &["reason"]).unwrap_or("a hook objected to the result").to_owned());
            }
            if object.get("continue") == Some(&Value::Bool(false)) {
                part.context
                    .push(text_at(&object, &["stopReason"]).unwrap_or("a hook asks to stop").to_owned());
            }
            if let Some(context) = text_at(&object, &["hookSpecificOutput", "additionalContext"]) {
                part.context.push(context.to_owned());
            }
            part
        }
    }
}

#[async_trait]
impl CallHooks for Hooks {
    fn matches(&self, event: &str, call: &HookedCall<'_>) -> bool {
        let claude = names::claude_name(call.tool, call.api, call.arguments);
        self.has(event, Some(&[claude.as_deref().unwrap_or(call.function), call.function, call.api]))
    }

    async fn pre_tool_use(&self, call: &HookedCall<'_>) -> HookAnswer {
        self.call_event("PreToolUse", call, |_| {}, fold_pre_tool_use).await
    }

    async fn permission_request(&self, call: &HookedCall<'_>, reason: &str, approval_id: &str) -> HookAnswer {
        let reason = reason.to_owned();
        let url = self.approval_url.as_ref().map(|template| template.replace("{id}", approval_id));
        let tenant = call.session.tenant.clone();
        self.call_event(
            "PermissionRequest",
            call,
            |input| {
                input.insert("reason".into(), json!(reason));
                input.insert("permission_suggestions".into(), json!([]));
                // Toolhost's own: what a person's script needs to link to the approval.
                input.insert("approval_id".into(), json!(approval_id));
                input.insert("tenant".into(), json!(tenant));
                if let Some(url) = url {
                    input.insert("approval_url".into(), json!(url));
                }
            },
            fold_permission_request,
        )
        .await
    }

    async fn post_tool_use(&self, call: &HookedCall<'_>, output: &ToolOutput) -> HookAnswer {
        let response = json!({
            "content": output.content,
            "success": output.success,
            "state": output.state,
        });
        self.call_event(
            "PostToolUse",
            call,
            |input| {
                input.insert("tool_response".into(), response);
            },
            fold_post_tool_use,
        )
        .await
    }
}

/// A person's hooks for a folder: `hooks.json` in the configuration folder, and — only when the
/// person trusted the folder — its `.toolhost/hooks.json` and the hooks of `.claude/settings.json`
/// and `.claude/settings.local.json` (read, never written). Files that cannot be read are warnings, not errors.
pub fn for_folder(config_dir: Option<&Path>, folder: &Path, trusted: bool) -> HookSet {
    let mut set = HookSet::default();
    let mut read = |path: PathBuf, origin: Origin| {
        if let Err(error) = set.read_file(&path, origin) {
            set.warnings.push(error.to_string());
        }
    };
    if let Some(dir) = config_dir {
        read(dir.join("hooks.json"), Origin::Person);
    }
    if trusted {
        read(folder.join(".toolhost").join("hooks.json"), Origin::Project);
        read(folder.join(".claude").join("settings.json"), Origin::Project);
        read(folder.join(".claude").join("settings.local.json"), Origin::Project);
    } else {
        let found: Vec<String> =
            [".toolhost/hooks.json", ".claude/settings.json", ".claude/settings.local.json"]
                .into_iter()
                .filter(|file| folder.join(file).is_file())
                .map(str::to_owned)
                .collect();
        if !found.is_empty() {
            set.warnings.push(format!(
                "this folder's hooks ({}) are not run: the folder is not trusted (/trust)",
                found.join(", ")
            ));
        }
    }
    set
}
