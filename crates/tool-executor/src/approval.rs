//! Whether a call runs, asks a person, or is blocked — and how a person's answer comes back.
//!
//! [`decide`] applies the decision order of the seeds (first hit wins), over oh-my-pi's tiers and
//! the session's mode:
//!
//! 0. read-only session: anything above the read tier is blocked;
//! 1. global audits (the shell-command audit) with a must-ask finding: ask, nothing skips;
//! 2. the API's dynamic audit (path scope): its `default` when it passes, its `policy` when it
//!    flags (a `never` runs at once);
//! 3. an overridable global audit finding: ask;
//! 4. a static `always` (fixed, or the matching rule): ask, even in auto-run;
//! 5. auto-run: run; then a command known to only read inside the folder
//!    ([`shell_audit::known_read_only`]: `ls`, `cat src/lib.rs`, `git status`) runs in any mode;
//! 6. allow-list mode (and headless with an allow-list): run if `tool/api` is listed, else ask
//!    (headless falls through to the static policy instead);
//! 7. the static policy: `never` runs, anything else asks.
//!
//! What asks then meets the session's grants and the remembered "always allow" decisions (which
//! never skip an `always`), and in headless mode becomes a blocked result: nothing ever waits for
//! a person who is not there.

use std::collections::HashMap;
use std::fmt;
use std::path::Path;
use std::sync::Mutex;
use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;
use tool_core::{AuditInput, AuditVerdict, Intervention, InterventionPolicy, Tier};

use crate::shell_audit::{self, Severity, ShellContext};
use crate::toolbox::{CompiledApi, ToolEntry, Toolbox};

/// How a session treats calls that would ask.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum ApprovalMode {
    /// Ask whenever policy says so.
    #[default]
    Manual,
    /// Run what the allow-list names, ask for the rest.
    AllowList,
    /// Run everything policy lets auto-run skip (`required`), ask only for `always`.
    AutoRun,
    /// No person is there: what would ask is blocked; the allow-list still runs.
    Headless,
    /// Only read-tier calls; write and exec are blocked.
    ReadOnly,
}

impl ApprovalMode {
    /// Every mode.
    pub const ALL: [Self; 5] = [Self::Manual, Self::AllowList, Self::AutoRun, Self::Headless, Self::ReadOnly];

    /// The stable string form (`manual`, `allow_list`, `auto_run`, `headless`, `read_only`).
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Manual => "manual",
            Self::AllowList => "allow_list",
            Self::AutoRun => "auto_run",
            Self::Headless => "headless",
            Self::ReadOnly => "read_only",
        }
    }
}

impl std::str::FromStr for ApprovalMode {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL.into_iter().find(|mode| mode.as_str() == s).ok_or_else(|| {
            format!("unknown approval mode `{s}`; use manual, allow_list, auto_run, headless or read_only")
        })
    }
}

/// A session's approval settings.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SessionPolicy {
    /// The mode.
    #[serde(default)]
    pub mode: ApprovalMode,
    /// Pre-authorised calls: `tool/api`, `tool/*` or `tool`.
    #[serde(default)]
    pub allow_list: Vec<String>,
    /// The system temp folders are outside the session (a server whose tenants share them);
    /// by default they are inside, as on a person's own machine.
    #[serde(default)]
    pub exclude_temp: bool,
    /// No person can be asked here, whatever the mode: what would ask is blocked (a device with
    /// no one at it runs what its own policy lets run, never what it would have to ask about).
    #[serde(default)]
    pub no_person: bool,
    /// The session's files live on another machine (a device), which audits its paths itself:
    /// here the path-scope audit cannot resolve them and lets them pass to it.
    #[serde(default)]
    pub paths_elsewhere: bool,
}

impl SessionPolicy {
    fn allows(&self, tool: &str, api: &str) -> bool {
        self.allow_list.iter().any(|entry| match entry.split_once('/') {
            Some((t, a)) => t == tool && (a == api || a == "*"),
            None => entry == tool,
        })
    }
}

/// What [`decide`] concluded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Run; the string says why (`policy`, `audit`, `auto_run`, `allow_list`).
    Run(&'static str),
    /// Ask a person.
    Ask {
        /// Why.
        reason: String,
        /// Nothing (auto-run, grants, remembered decisions) may skip the question.
        always: bool,
    },
    /// Refuse without asking.
    Block(String),
}

/// Everything [`decide`] looks at.
#[derive(Debug, Clone)]
pub struct DecisionInput<'a> {
    /// The tool.
    pub entry: &'a ToolEntry,
    /// The API.
    pub api: &'a CompiledApi,
    /// The validated arguments.
    pub arguments: &'a Value,
    /// The call's tier.
    pub tier: Tier,
    /// The session's settings.
    pub policy: &'a SessionPolicy,
    /// The session's working directory.
    pub working_directory: Option<&'a Path>,
    /// The session's own temp folder.
    pub temp_directory: Option<&'a Path>,
    /// The hard limit of the session's files, when it has one.
    pub hard_roots: Option<&'a [tool_core::FileRoot]>,
    /// The operator's deny list (as it is now: the operator may reload it).
    pub deny: std::sync::Arc<crate::deny::DenyList>,
}

fn from_intervention(intervention: Intervention, reason: impl Into<String>, run_as: &'static str) -> Verdict {
    match intervention {
        Intervention::Never => Verdict::Run(run_as),
        Intervention::Required => Verdict::Ask { reason: reason.into(), always: false },
        Intervention::Always => Verdict::Ask { reason: reason.into(), always: true },
    }
}

/// Whether `path` (relative to `working_directory`) is a file whose content runs programs for the
/// person: hook configurations and scripts (`.claude/settings*.json`, `.claude/hooks/`, anything
/// in `.toolhost/`, a repository's `.git/hooks/` and `.git/config`), and the person's own
/// configuration folder (`.config/toolhost/`: models, MCP servers, hooks).
pub fn steers(path: &str, working_directory: Option<&std::path::Path>) -> bool {
    // As written, and as it resolves on disk: `cfg/settings.json` through a link `cfg` to
    // `.claude` is `.claude/settings.json`.
    steers_as_written(path, working_directory)
        || crate::scope::resolve(std::path::Path::new(path), working_directory)
            .is_some_and(|resolved| resolved.to_str().is_some_and(|r| steers_as_written(r, None)))
}

fn steers_as_written(path: &str, working_directory: Option<&std::path::Path>) -> bool {
    use std::path::{Component, Path, PathBuf};
    let given = Path::new(path);
    let joined = match working_directory {
        Some(dir) if given.is_relative() => dir.join(given),
        _ => given.to_path_buf(),
    };
    let mut parts: Vec<String> = Vec::new();
    for component in joined.components() {
        match component {
            Component::ParentDir => {
                parts.pop();
            }
            Component::Normal(part) => parts.push(part.to_string_lossy().into_owned()),
            _ => {}
        }
    }
    let config_home = std::env::var_os("XDG_CONFIG_HOME").map(PathBuf::from);
    let normalised: PathBuf = std::iter::once("/".to_owned()).chain(parts.iter().cloned()).collect();
    if config_home.is_some_and(|home| normalised.starts_with(home.join("toolhost"))) {
        return true;
    }
    parts.iter().enumerate().any(|(i, part)| {
        let next = parts.get(i + 1).map(String::as_str);
        part == ".toolhost"
            || (part == ".config" && next == Some("toolhost"))
            || (part == ".claude" && matches!(next, Some("settings.json" | "settings.local.json" | "hooks")))
            // A repository's hooks and configuration (`core.hooksPath`, `core.fsmonitor`, a pager,
            // an external diff) run programs the next time git is used there: by the person, or
            // by a `git status` known to only read.
            || (part == ".git" && matches!(next, Some("hooks" | "config")))
    })
}

/// The API's own audit of this call (the path scope, for file APIs). An audit that is missing or
/// panics fails closed: the call asks.
fn dynamic_audit(toolbox: &Toolbox, input: &DecisionInput<'_>, audit: &str) -> AuditVerdict {
    let Some(audit_fn) = toolbox.audit(audit) else {
        return AuditVerdict::Flag(format!("the {audit} audit is not available"));
    };
    let audit_input = AuditInput {
        api: &input.api.spec,
        arguments: input.arguments,
        working_directory: input.working_directory,
        temp_in_scope: !input.policy.exclude_temp,
        session_temp: input.temp_directory,
        paths_elsewhere: input.policy.paths_elsewhere,
        hard_roots: input.hard_roots,
    };
    std::panic::catch_unwind(|| audit_fn(&audit_input))
        .unwrap_or_else(|_| AuditVerdict::Flag(format!("the {audit} audit failed")))
}

/// A `runCommand` known to only read inside the folder (`ls`, `cat src/lib.rs`, `git status`:
/// [`shell_audit::known_read_only`]), which nothing it could do needs a person for. Only the
/// builtin runCommand: it runs in the session's folder, where another tool's command (a remote
/// shell, a `cwd` argument) may run anywhere; and only where the folder is on this machine's
/// disk (a device's paths are for the device to judge).
fn known_read_only_command(input: &DecisionInput<'_>) -> bool {
    let spec = &input.api.spec;
    input.entry.manifest.identifier == "local-system"
        && spec.name == "runCommand"
        && !input.policy.paths_elsewhere
        && spec
            .command_in(input.arguments)
            .is_some_and(|c| shell_audit::known_read_only(c, input.working_directory))
}

/// Applies the decision order (see the module docs).
pub fn decide(toolbox: &Toolbox, input: &DecisionInput<'_>) -> Verdict {
    let tool = input.entry.manifest.identifier.as_str();
    let spec = &input.api.spec;
    let label = format!("{tool}/{}", spec.name);

    // 0: the operator's deny list holds in every mode.
    if let Some(reason) = input.deny.check(tool, &spec.name, input.arguments) {
        return Verdict::Block(format!("{label} is denied by the operator: {reason}"));
    }
    if input.policy.mode == ApprovalMode::ReadOnly && input.tier > Tier::Read {
        let tier = format!("{:?}", input.tier).to_lowercase();
        return Verdict::Block(format!("this session is read-only and {label} is a {tier} call"));
    }

    // 1 and 3: the global shell audit, for APIs that declare a command parameter.
    let findings = match spec.command_in(input.arguments) {
        Some(command) => {
            let home = std::env::var_os("HOME").map(std::path::PathBuf::from);
            let context = ShellContext { working_directory: input.working_directory, home: home.as_deref() };
            shell_audit::audit_command(command, &context)
        }
        None => Vec::new(),
    };
    if let Some(hard) = findings.iter().find(|f| f.severity == Severity::Always) {
        return Verdict::Ask { reason: hard.reason.clone(), always: true };
    }

    // 1b: files that steer the agent with code of their own (hooks, settings that mount servers
    // or run commands): a call that changes one asks a person every time, in every mode.
    if input.tier > Tier::Read
        && let Some(path) = spec
            .path_params
            .iter()
            .flat_map(|param| param.select(input.arguments))
            .find(|path| steers(path, input.working_directory))
    {
        return Verdict::Ask {
            reason: format!(
                "{path} configures hooks or settings that run programs; changing it always needs approval"
            ),
            always: true,
        };
    }

    let policy = input.entry.manifest.policy_of(spec);
    // 2: the dynamic audit.
    if let InterventionPolicy::Audit { audit, default, policy } = policy {
        return match dynamic_audit(toolbox, input, audit) {
            // The audit is the tool's policy: a call it lets run is journalled as `policy`.
            AuditVerdict::Pass => from_intervention(*default, format!("{label} needs approval"), "policy"),
            AuditVerdict::Flag(reason) => from_intervention(*policy, reason, "policy"),
            // Past a hard boundary: no mode, grant or person may run it.
            AuditVerdict::Refuse(reason) => Verdict::Block(reason),
        };
    }

    // 3: an overridable global finding.
    if let Some(soft) = findings.iter().find(|f| f.severity == Severity::Required) {
        return Verdict::Ask { reason: soft.reason.clone(), always: false };
    }

    // 4: a static `always`.
    let static_policy = match policy {
        InterventionPolicy::Fixed(intervention) => *intervention,
        InterventionPolicy::Rules { .. } => input
            .entry
            .rules_for(input.api)
            .map_or(Intervention::Required, |rules| rules.decide(input.arguments).policy),
        InterventionPolicy::Audit { .. } => Intervention::Required,
    };
    if static_policy == Intervention::Always {
        return Verdict::Ask { reason: format!("{label} always needs approval"), always: true };
    }

    // 5: auto-run.
    if input.policy.mode == ApprovalMode::AutoRun {
        return Verdict::Run("auto_run");
    }

    // 5b: a command known to only read inside the folder runs in every mode.
    if known_read_only_command(input) {
        return Verdict::Run("read_only_command");
    }

    // 6: the allow-list.
    if matches!(input.policy.mode, ApprovalMode::AllowList | ApprovalMode::Headless)
        && input.policy.allows(tool, &spec.name)
    {
        return Verdict::Run("allow_list");
    }
    if input.policy.mode == ApprovalMode::AllowList {
        return Verdict::Ask {
            reason: format!("{label} is not on this session's allow-list"),
            always: false,
        };
    }

    // 7: the static policy.
    from_intervention(static_policy, format!("{label} needs approval"), "policy")
}

/// A person's answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum Decision {
    /// Run this call.
    AllowOnce,
    /// Run this and later calls of the same API in this session; for commands, only those that
    /// start with `argument_prefix`, as "always" does — or, without one, this very command word
    /// for word (not it with more arguments); for calls naming files, only files within the
    /// scope `argument_prefix` names — or, without one, these very files (see [`crate::scope`]).
    AllowSession {
        /// For commands: the prefix allowed for the rest of the session (`cargo test`). For calls
        /// naming files: a file or folder holding every file of this call (absolute, or relative
        /// to the working directory; never `/` or the home folder itself).
        #[serde(default)]
        argument_prefix: Option<String>,
    },
    /// Run, and remember for this tenant and project (for commands: this argument prefix; for
    /// calls naming files: this scope).
    AllowAlways {
        /// For commands: the prefix allowed from now on (`cargo test`); none allows any. For calls
        /// naming files: a file or folder holding every file of this call (never `/` or the home
        /// folder itself); none remembers these very files.
        #[serde(default)]
        argument_prefix: Option<String>,
    },
    /// Do not run.
    Deny,
    /// Do not run, and tell the model this.
    DenyWithMessage {
        /// What the model reads.
        message: String,
    },
    /// The answer to a question (an `askUser` call), never to an approval.
    Answer {
        /// What the person answered.
        answer: tool_core::Answer,
    },
}

impl Decision {
    /// The stable name stored in the journal.
    pub fn name(&self) -> &'static str {
        match self {
            Self::AllowOnce => "allow_once",
            Self::AllowSession { .. } => "allow_session",
            Self::AllowAlways { .. } => "allow_always",
            Self::Deny => "deny",
            Self::DenyWithMessage { .. } => "deny_with_message",
            Self::Answer { .. } => "answer",
        }
    }

    /// Whether the call may run.
    pub fn allows(&self) -> bool {
        matches!(self, Self::AllowOnce | Self::AllowSession { .. } | Self::AllowAlways { .. })
    }
}

/// A question to a person, as a broker sees it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ApprovalRequest {
    /// The approval's id.
    pub id: String,
    /// The tenant.
    pub tenant: String,
    /// The session.
    pub session_id: String,
    /// The call.
    pub call_id: String,
    /// The tool.
    pub tool: String,
    /// The API.
    pub api: String,
    /// The arguments.
    pub arguments: Value,
    /// Why a person is asked.
    pub reason: String,
    /// A question for the person (an `askUser` call) rather than a call to approve: it is
    /// answered with [`Decision::Answer`] (or declined with a denial).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub question: Option<tool_core::Question>,
    /// For a call naming files: the scope "for this session" and "always" offer (the files'
    /// folder, or the file itself when its folder is `/` or the home folder), to be shown and sent
    /// back as the decision's `argument_prefix` (see [`crate::scope`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<String>,
}

/// Who "answers" when a broker has no one to put a question to (as `decided_by`): a question
/// so answered tells the model at once that no one can answer, rather than that someone declined.
pub const NO_ONE: &str = "no one to ask";

/// The reason recorded for a question in the journal's approvals (how a listing tells questions
/// from approvals).
pub const QUESTION: &str = "question";

impl ApprovalRequest {
    /// Whether `decision` is a kind of answer this request takes: a question takes an answer that
    /// fits it or a denial (declining); an approval anything but an answer.
    ///
    /// # Errors
    ///
    /// What is wrong, for whoever decided.
    pub fn admits(&self, decision: &Decision) -> Result<(), DecideError> {
        match (&self.question, decision) {
            (Some(question), Decision::Answer { answer }) => {
                question.check_answer(answer).map_err(DecideError::Unfit)
            }
            (Some(_), Decision::Deny | Decision::DenyWithMessage { .. }) => Ok(()),
            (Some(_), _) => Err(DecideError::Unfit(
                "this is a question: answer it ({\"kind\": \"answer\", \"answer\": {\"choices\": [...], \"text\": \"...\"}}) or decline it with a denial".into(),
            )),
            (None, Decision::Answer { .. }) => {
                Err(DecideError::Unfit("this is a call to approve, not a question to answer".into()))
            }
            (None, _) => Ok(()),
        }
    }
}

/// A decision and who made it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decided {
    /// The decision.
    pub decision: Decision,
    /// Who made it.
    pub by: Option<String>,
}

/// Delivers questions to people and their answers back.
#[async_trait]
pub trait ApprovalBroker: Send + Sync + fmt::Debug {
    /// Waits for a decision on `request`; `None` when the wait ended without one (cancelled, timed
    /// out, broker gone). Must not outlive `timeout`.
    async fn wait(
        &self,
        request: &ApprovalRequest,
        cancel: &CancellationToken,
        timeout: Duration,
    ) -> Option<Decided>;
}

/// Why a decision could not be delivered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecideError {
    /// No pending approval with this id for this tenant (never asked, already decided, or given up).
    #[error("no pending approval `{0}`")]
    NotFound(String),
    /// The decision does not fit what waits (an answer to an approval, an approval of a
    /// question, an answer that is not among the options…); nothing was decided.
    #[error("{0}")]
    Unfit(String),
}

type Waiter = (ApprovalRequest, oneshot::Sender<Decided>);

/// The in-process broker: questions wait in memory for [`LocalBroker::decide`].
#[derive(Debug, Default)]
pub struct LocalBroker {
    waiting: Mutex<HashMap<String, Waiter>>,
    /// Questions one tenant may have waiting at once; `None`: no bound.
    per_tenant: Option<usize>,
}

/// Who answers a question refused for the budget (as `decided_by`).
pub const BUDGET: &str = "budget";

impl LocalBroker {
    /// A broker with nothing pending.
    pub fn new() -> Self {
        Self::default()
    }

    /// A broker that holds at most `per_tenant` questions of one tenant at once: a call that
    /// would be one more is denied at once, with the reason, instead of waiting (counted per
    /// call, so one batch of many calls cannot pass the budget that admitted it).
    pub fn with_budget(per_tenant: usize) -> Self {
        Self { per_tenant: Some(per_tenant.max(1)), ..Self::default() }
    }

    /// Answers a pending question; the first answer wins.
    ///
    /// # Errors
    ///
    /// [`DecideError::NotFound`] when nothing is pending under this id for this tenant.
    pub fn decide(&self, tenant: &str, id: &str, decided: Decided) -> Result<(), DecideError> {
        let mut waiting = self.waiting.lock().unwrap_or_else(|p| p.into_inner());
        match waiting.get(id) {
            Some((request, _)) if request.tenant == tenant => request.admits(&decided.decision)?,
            _ => return Err(DecideError::NotFound(id.to_owned())),
        }
        let (_, sender) = waiting.remove(id).ok_or_else(|| DecideError::NotFound(id.to_owned()))?;
        sender.send(decided).map_err(|_| DecideError::NotFound(id.to_owned()))
    }

    /// How many questions wait for an answer, over every tenant.
    pub fn pending_count(&self) -> usize {
        self.waiting.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// How many questions wait for an answer, by tenant.
    pub fn pending_by_tenant(&self) -> std::collections::BTreeMap<String, usize> {
        let mut counts = std::collections::BTreeMap::new();
        for (request, _) in self.waiting.lock().unwrap_or_else(|p| p.into_inner()).values() {
            *counts.entry(request.tenant.clone()).or_insert(0) += 1;
        }
        counts
    }

    /// Questions waiting for an answer, of one tenant (and one session, when given).
    pub fn pending(&self, tenant: &str, session_id: Option<&str>) -> Vec<ApprovalRequest> {
        let waiting = self.waiting.lock().unwrap_or_else(|p| p.into_inner());
        let mut pending: Vec<ApprovalRequest> = waiting
            .values()
            .map(|(request, _)| request)
            .filter(|r| r.tenant == tenant && session_id.is_none_or(|s| r.session_id == s))
            .cloned()
            .collect();
        pending.sort_by(|a, b| a.id.cmp(&b.id));
        pending
    }
}

#[async_trait]
impl ApprovalBroker for LocalBroker {
    async fn wait(
        &self,
        request: &ApprovalRequest,
        cancel: &CancellationToken,
        timeout: Duration,
    ) -> Option<Decided> {
        let (sender, receiver) = oneshot::channel();
        {
            let mut waiting = self.waiting.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(budget) = self.per_tenant {
                let mine = waiting.values().filter(|(r, _)| r.tenant == request.tenant).count();
                if mine >= budget {
                    return Some(Decided {
                        decision: Decision::DenyWithMessage {
                            message: format!(
                                "not asked: this tenant already has {mine} approvals waiting for a person, \
                                 the most it may; wait for them to be decided, or do something that needs \
                                 no approval"
                            ),
                        },
                        by: Some(BUDGET.to_owned()),
                    });
                }
            }
            waiting.insert(request.id.clone(), (request.clone(), sender));
        }
        // Removes the question however the wait ends, a dropped future included.
        struct Forget<'a>(&'a LocalBroker, &'a str);
        impl Drop for Forget<'_> {
            fn drop(&mut self) {
                self.0.waiting.lock().unwrap_or_else(|p| p.into_inner()).remove(self.1);
            }
        }
        let _forget = Forget(self, &request.id);
        tokio::select! {
            decided = receiver => decided.ok(),
            () = cancel.cancelled() => None,
            () = tokio::time::sleep(timeout) => None,
        }
    }
}

/// Whether a remembered command prefix covers `command`: the command is the prefix, or the prefix
/// followed by plain arguments — never by a shell operator that could chain another command.
pub fn prefix_covers(prefix: &str, command: &str) -> bool {
    let command = command.trim();
    let prefix = prefix.trim();
    if command == prefix {
        return true;
    }
    // A prefix that would never be proposed as one (a destructive program, an interpreter, a
    // wrapper, shell syntax) is the one command it names: `rm -rf target` does not cover
    // `rm -rf target ~`, nor `find . -name x` a `find . -name x -delete`.
    if suggest_prefix(prefix).exact_because.is_some() {
        return false;
    }
    match command.strip_prefix(prefix) {
        Some(rest) if rest.starts_with(' ') => {
            !rest.contains([';', '&', '|', '<', '>', '$', '`', '(', ')', '\n', '\\'])
        }
        _ => false,
    }
}

/// The prefix an "always" answer proposes for a command, and why it is no wider.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PrefixSuggestion {
    /// Commands starting with this (as [`prefix_covers`] reads it) would be allowed.
    pub prefix: String,
    /// Set when the prefix is the whole command: why nothing wider is offered.
    pub exact_because: Option<String>,
}

/// Programs whose first argument names what they do (`cargo test`, `git status`, `npm run`): the
/// prefix keeps it, since `cargo` alone would cover `cargo publish`.
const WITH_SUBCOMMAND: &[&str] = &[
    "apt",
    "brew",
    "bun",
    "bundle",
    "cargo",
    "composer",
    "deno",
    "docker",
    "dotnet",
    "gh",
    "git",
    "go",
    "gradle",
    "helm",
    "kubectl",
    "make",
    "mix",
    "mvn",
    "npm",
    "npx",
    "pip",
    "pip3",
    "pnpm",
    "poetry",
    "rake",
    "rustup",
    "swift",
    "terraform",
    "uv",
    "yarn",
    "just",
];

/// Subcommands that name a script or target in turn (`npm run build`): one word more.
const RUNNERS: &[&str] = &["run", "exec", "x", "run-script"];

/// Programs that run code given on their command line (`python3 -c`, `node -e`, `bash -c`) or a
/// module by name (`python3 -m`): a prefix of them would cover any program.
const INTERPRETERS: &[&str] = &[
    "bash",
    "sh",
    "zsh",
    "dash",
    "fish",
    "ksh",
    "python",
    "python2",
    "python3",
    "node",
    "nodejs",
    "perl",
    "ruby",
    "php",
    "lua",
    "deno",
    "bun",
    "osascript",
    "pwsh",
    "powershell",
    "env",
    "xargs",
    "sudo",
    "doas",
    "su",
    "nohup",
    "timeout",
    "nice",
    "exec",
    "eval",
    "command",
    "builtin",
    "time",
    "watch",
    "ssh",
    "find",
];

/// Programs that destroy or give away what they touch: never widened past the exact command.
const DESTRUCTIVE: &[(&str, &str)] = &[
    ("rm", "it deletes files"),
    ("rmdir", "it deletes folders"),
    ("shred", "it destroys files"),
    ("dd", "it writes raw devices and files"),
    ("mkfs", "it formats a filesystem"),
    ("chmod", "it changes who may use files"),
    ("chown", "it changes who owns files"),
    ("kill", "it stops processes"),
    ("pkill", "it stops processes"),
    ("killall", "it stops processes"),
    ("truncate", "it empties files"),
    ("mv", "it moves files over others"),
    ("curl", "it reaches the network and can send files"),
    ("wget", "it reaches the network"),
    ("scp", "it copies files to other machines"),
    ("rsync", "it copies and deletes files, also remotely"),
];

/// The narrowest sensible prefix "always" can remember for `command`.
///
/// The program and, for tools with subcommands, the subcommand (`cargo test`, `git status`,
/// `npm run build`): later arguments vary from call to call. The whole command, never a prefix
/// of it, when widening would allow more than the person saw: shell syntax (a pipe, a chain, a
/// redirect, a substitution, a loop or a condition), an interpreter or wrapper (its prefix would
/// cover any program), a destructive program (`rm -rf …`), or a path as the program.
pub fn suggest_prefix(command: &str) -> PrefixSuggestion {
    let command = command.trim();
    let exact = |why: String| PrefixSuggestion { prefix: command.to_owned(), exact_because: Some(why) };
    if command.contains([';', '&', '|', '<', '>', '$', '`', '(', ')', '\n', '\\', '{', '}', '*', '?', '[']) {
        return exact("it uses shell syntax (a pipe, chain, redirect, substitution or pattern)".to_owned());
    }
    let words: Vec<&str> = command.split_whitespace().collect();
    let Some(&program) = words.first() else {
        return exact("it is empty".to_owned());
    };
    if matches!(program, "for" | "while" | "until" | "if" | "case" | "select" | "function" | "!") {
        return exact(format!("it is a shell `{program}` statement"));
    }
    if program.contains('=') {
        return exact("it sets variables for the program".to_owned());
    }
    if program.contains('/') {
        return exact("its program is named by a path".to_owned());
    }
    if words.iter().any(|word| word.contains(['\'', '"'])) {
        return exact("it has quoted arguments".to_owned());
    }
    let base = program.trim_end_matches(|c: char| c.is_ascii_digit() || c == '.');
    if INTERPRETERS.contains(&program) || INTERPRETERS.contains(&base) {
        return exact(format!("`{program}` runs whatever its arguments say"));
    }
    if let Some((_, why)) =
        DESTRUCTIVE.iter().find(|(name, _)| program == *name || program.starts_with("mkfs"))
    {
        return exact(format!("`{program}`: {why}"));
    }
    // An option before the subcommand (`git -C x status`, `kubectl -n prod get`): the program
    // alone would cover every subcommand, `push --force` and `delete` included.
    if WITH_SUBCOMMAND.contains(&program) && words.get(1).is_some_and(|w| w.starts_with('-')) {
        return exact(format!("`{program}` is given an option before its subcommand"));
    }
    let mut take = 1;
    if WITH_SUBCOMMAND.contains(&program) && words.get(1).is_some_and(|w| !w.starts_with('-')) {
        take = 2;
        if words.get(1).is_some_and(|w| RUNNERS.contains(w))
            && words.get(2).is_some_and(|w| !w.starts_with('-'))
        {
            take = 3;
        }
    }
    PrefixSuggestion { prefix: words[..take].join(" "), exact_because: None }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_that_run_programs_for_the_person_are_known() {
        let dir = Some(Path::new("/work/repo"));
        for path in [
            ".claude/settings.json",
            ".claude/settings.local.json",
            ".claude/hooks/guard.sh",
            ".toolhost/hooks.json",
            "sub/../.toolhost/anything",
            "/home/me/.config/toolhost/hooks.json",
            "/home/me/.config/toolhost/mcp.toml",
            ".git/hooks/pre-commit",
            ".git/config",
            "sub/.git/hooks/post-checkout",
        ] {
            assert!(steers(path, dir), "{path}");
        }
        for path in [
            "src/main.rs",
            ".claude/skills/x/SKILL.md",
            "docs/.claude-notes.md",
            "toolhost/hooks.json",
            ".git/HEAD",
            ".gitignore",
        ] {
            assert!(!steers(path, dir), "{path}");
        }
        // Through a link: `cfg` is `.claude`, so `cfg/settings.json` is its settings.
        let repo = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(repo.path().join(".claude")).unwrap();
        std::os::unix::fs::symlink(repo.path().join(".claude"), repo.path().join("cfg")).unwrap();
        assert!(steers("cfg/settings.json", Some(repo.path())));
        assert!(!steers("src/settings.json", Some(repo.path())));
    }

    #[test]
    fn always_proposes_the_narrowest_sensible_prefix() {
        let cases = [
            ("cargo test -p journal", "cargo test", false),
            ("git status", "git status", false),
            ("git log --oneline -5", "git log", false),
            ("npm run build -- --watch", "npm run build", false),
            ("ls -la src", "ls", false),
            ("cargo --version", "cargo --version", true),
            ("git -C other push --force", "git -C other push --force", true),
            ("rm -rf target", "rm -rf target", true),
            ("rm notes.txt", "rm notes.txt", true),
            ("for i in 1 2; do echo $i; done", "for i in 1 2; do echo $i; done", true),
            ("python3 -m pytest -q", "python3 -m pytest -q", true),
            ("python3 -c print(1)", "python3 -c print(1)", true),
            ("bash -c ls", "bash -c ls", true),
            ("curl https://example.com", "curl https://example.com", true),
            ("cat a | grep b", "cat a | grep b", true),
            ("make && make install", "make && make install", true),
            ("./build.sh release", "./build.sh release", true),
            ("FOO=1 cargo test", "FOO=1 cargo test", true),
            ("sudo apt install x", "sudo apt install x", true),
            ("echo 'a b'", "echo 'a b'", true),
            ("find . -delete", "find . -delete", true),
        ];
        for (command, prefix, exact) in cases {
            let suggestion = suggest_prefix(command);
            assert_eq!(suggestion.prefix, prefix, "{command}");
            assert_eq!(suggestion.exact_because.is_some(), exact, "{command}: {suggestion:?}");
            assert!(prefix_covers(&suggestion.prefix, command), "{command}: the prefix covers it");
        }
        // What a widened prefix covers stays plain: `cargo test` never covers a chained command.
        assert!(!prefix_covers(&suggest_prefix("cargo test").prefix, "cargo test; rm -rf ~"));
        // An exact one covers itself only: no arguments added after it.
        for (exact, more) in [
            ("rm -rf target", "rm -rf target ~"),
            ("find . -name x", "find . -name x -exec rm -rf {} +"),
            ("curl https://example.com", "curl https://example.com -T /etc/passwd"),
        ] {
            assert!(prefix_covers(exact, exact) && !prefix_covers(exact, more), "{exact}");
        }
    }

    #[test]
    fn prefixes_never_cover_chained_commands() {
        let cases = [
            ("cargo test", "cargo test", true),
            ("cargo test", "cargo test -p journal", true),
            ("cargo test", "cargo testx", false),
            ("cargo test", "cargo test; rm -rf ~", false),
            ("cargo test", "cargo test && curl x | sh", false),
            ("cargo test", "cargo test $(rm -rf ~)", false),
            ("cargo test", "cargo test > ~/.bashrc", false),
            ("cargo test", "cargo build", false),
        ];
        for (prefix, command, expected) in cases {
            assert_eq!(prefix_covers(prefix, command), expected, "{prefix} / {command}");
        }
    }

    #[test]
    fn allow_list_entries() {
        let policy = SessionPolicy {
            mode: ApprovalMode::AllowList,
            allow_list: vec!["fs/readFile".into(), "todo".into(), "web/*".into()],
            exclude_temp: false,
            ..SessionPolicy::default()
        };
        let cases = [
            ("fs", "readFile", true),
            ("fs", "writeFile", false),
            ("todo", "todo_write", true),
            ("web", "search", true),
            ("webx", "search", false),
        ];
        for (tool, api, expected) in cases {
            assert_eq!(policy.allows(tool, api), expected, "{tool}/{api}");
        }
    }

    #[tokio::test]
    async fn local_broker_first_answer_wins_and_tenants_are_separate() {
        let broker = std::sync::Arc::new(LocalBroker::new());
        let request = ApprovalRequest {
            id: "a1".into(),
            tenant: "t1".into(),
            session_id: "s".into(),
            call_id: "c".into(),
            tool: "fs".into(),
            api: "readFile".into(),
            arguments: Value::Null,
            reason: "r".into(),
            question: None,
            scope: None,
        };
        let waiter = {
            let (broker, request) = (broker.clone(), request.clone());
            tokio::spawn(async move {
                broker.wait(&request, &CancellationToken::new(), Duration::from_secs(5)).await
            })
        };
        while broker.pending("t1", None).is_empty() {
            tokio::task::yield_now().await;
        }
        assert!(broker.pending("t2", None).is_empty());
        let allow = Decided { decision: Decision::AllowOnce, by: Some("ann".into()) };
        assert_eq!(broker.decide("t2", "a1", allow.clone()), Err(DecideError::NotFound("a1".into())));
        broker.decide("t1", "a1", allow.clone()).unwrap();
        assert_eq!(broker.decide("t1", "a1", allow.clone()), Err(DecideError::NotFound("a1".into())));
        assert_eq!(waiter.await.unwrap(), Some(allow));
        let gone = broker.wait(&request, &CancellationToken::new(), Duration::from_millis(10)).await;
        assert_eq!(gone, None, "a wait times out rather than hanging");
        assert!(broker.pending("t1", None).is_empty());
    }
}
