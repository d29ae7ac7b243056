//! What a tool declares: pure data that serialises, stores and round-trips.
//!
//! A manifest never holds behaviour. Where policy needs code (a dynamic audit such as path scope,
//! a tier computed from the arguments) the manifest *names* it and the registry's tables supply
//! the function, so a manifest can be sent to another process or stored in the journal as is.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A tool: one package with its APIs, policy and system role.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolManifest {
    /// Stable identifier, lowercase kebab-case (`local-system`).
    pub identifier: String,
    /// Title, description and icon for people and for the model.
    pub meta: ToolMeta,
    /// The APIs the model may call.
    pub apis: Vec<ApiSpec>,
    /// Tool-level intervention policy; an API's own policy wins over it.
    #[serde(default)]
    pub intervention: InterventionPolicy,
    /// Where the tool may run.
    #[serde(default = "default_executors")]
    pub executors: Vec<Executor>,
    /// System-role prompt fragment, a template with `{{key}}` placeholders.
    #[serde(default)]
    pub system_role: String,
    /// How its functions reach the model: declared from the start (the default), deferred behind
    /// tool search, or never.
    #[serde(default, skip_serializing_if = "Exposure::is_direct")]
    pub exposure: Exposure,
}

/// How a tool's functions reach the model of a session.
///
/// A front end may override a tool's own exposure per session; what a session finally does is
/// one of `Direct`, `Deferred` or `Hidden` for each function.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Exposure {
    /// Declared to the model from the first turn (core tools).
    #[default]
    Direct,
    /// Direct while the session's tools are few, deferred once they pass the session's threshold
    /// of functions or schema tokens (mounted MCP servers).
    Auto,
    /// Not declared until tool search finds it; found, it is declared from the next turn on.
    Deferred,
    /// Never declared nor found by search, and the model cannot call it; other tools may.
    Hidden,
    /// Declared only while the session has deferred functions (tool search itself).
    WhenDeferred,
    /// Declared only when the session has skills the model may activate (the skills tool).
    WhenSkills,
}

impl Exposure {
    /// Whether this is the default, `Direct`.
    pub fn is_direct(&self) -> bool {
        *self == Self::Direct
    }

    /// The stable string form.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Direct => "direct",
            Self::Auto => "auto",
            Self::Deferred => "deferred",
            Self::Hidden => "hidden",
            Self::WhenDeferred => "when_deferred",
            Self::WhenSkills => "when_skills",
        }
    }
}

fn default_executors() -> Vec<Executor> {
    vec![Executor::Server]
}

impl ToolManifest {
    /// A manifest with no APIs, policy `required`, runnable on the server.
    pub fn new(identifier: impl Into<String>, meta: ToolMeta) -> Self {
        Self {
            identifier: identifier.into(),
            meta,
            apis: Vec::new(),
            intervention: InterventionPolicy::default(),
            executors: default_executors(),
            system_role: String::new(),
            exposure: Exposure::Direct,
        }
    }

    /// Sets how the tool's functions reach the model.
    #[must_use]
    pub fn exposure(mut self, exposure: Exposure) -> Self {
        self.exposure = exposure;
        self
    }

    /// Adds an API.
    #[must_use]
    pub fn api(mut self, api: ApiSpec) -> Self {
        self.apis.push(api);
        self
    }

    /// Sets the tool-level intervention policy.
    #[must_use]
    pub fn intervention(mut self, policy: InterventionPolicy) -> Self {
        self.intervention = policy;
        self
    }

    /// Sets where the tool may run.
    #[must_use]
    pub fn executors(mut self, executors: impl Into<Vec<Executor>>) -> Self {
        self.executors = executors.into();
        self
    }

    /// Sets the system-role template.
    #[must_use]
    pub fn system_role(mut self, template: impl Into<String>) -> Self {
        self.system_role = template.into();
        self
    }

    /// Finds an API by name.
    pub fn find_api(&self, name: &str) -> Option<&ApiSpec> {
        self.apis.iter().find(|api| api.name == name)
    }

    /// The effective intervention policy of an API: its own, else the tool's.
    pub fn policy_of<'a>(&'a self, api: &'a ApiSpec) -> &'a InterventionPolicy {
        api.intervention.as_ref().unwrap_or(&self.intervention)
    }

    /// Renders the system role, replacing `{{key}}` with the value of `key`.
    ///
    /// Unknown placeholders are left as they are, so a missing value is visible rather than
    /// silently blank.
    pub fn render_system_role(&self, values: &BTreeMap<&str, String>) -> String {
        render_template(&self.system_role, values)
    }
}

/// Title, description and icon.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolMeta {
    /// Short human title.
    pub title: String,
    /// What the tool is for, one or two sentences.
    pub description: String,
    /// An icon name or emoji.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub icon: Option<String>,
}

impl ToolMeta {
    /// Meta without an icon.
    pub fn new(title: impl Into<String>, description: impl Into<String>) -> Self {
        Self { title: title.into(), description: description.into(), icon: None }
    }

    /// Sets the icon.
    #[must_use]
    pub fn icon(mut self, icon: impl Into<String>) -> Self {
        self.icon = Some(icon.into());
        self
    }
}

/// Who runs a tool's calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Executor {
    /// In the server (or TUI) process.
    Server,
    /// On a user's device connected as a client executor.
    Client,
}

/// One API of a tool.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ApiSpec {
    /// The API name (one variant of the tool's API enum).
    pub name: String,
    /// What the API does, for the model.
    pub description: String,
    /// JSON Schema of the arguments, derived from the argument type.
    pub parameters: Value,
    /// Default timeout when the call gives none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_timeout_ms: Option<u64>,
    /// Largest timeout the call may ask for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_timeout_ms: Option<u64>,
    /// The API's own intervention policy; `None` falls back to the tool's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub intervention: Option<InterventionPolicy>,
    /// Read, write or exec, or computed from the arguments.
    #[serde(default)]
    pub tier: TierSpec,
    /// Whether calls may run beside others in a batch.
    #[serde(default)]
    pub execution: ExecutionMode,
    /// How a front end shows the call by default.
    #[serde(default)]
    pub display: DisplayControl,
    /// Arguments that are filesystem paths (checked by path-scope audits).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub path_params: Vec<PathParam>,
    /// The argument that holds a shell command line (checked by the global shell audit, and
    /// matched by remembered command-prefix decisions).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command_param: Option<String>,
    /// The call reaches beyond this machine (the web, a remote service): MCP's `openWorldHint`.
    /// Commands count as open-world by their tier.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub open_world: bool,
    /// JSON Schema of the structured result, when the API has one (a mounted MCP tool's
    /// `outputSchema`, kept when Toolhost serves it on).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_schema: Option<Value>,
    /// The annotations its source gave it (a mounted MCP tool's own), kept when served on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<Value>,
    /// In a session that previews writes, a call without `previewToken` shows its change (a diff
    /// and a token) instead of making it: it runs as a read, and the runtime sees
    /// `CallContext::preview`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub previewable: bool,
    /// Declared only in sessions that preview writes (the call that applies or discards a
    /// preview).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub when_previewing: bool,
    /// Its calls may wait for a person's answer (`askUser`): they are journalled before they
    /// run, whatever their tier, so what waits is on record.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub asks_person: bool,
}

/// The schema keyword that marks a parameter whose choices come from the session
/// (`"x-choices": "skills"`): each session declares them as the parameter's `enum`.
pub const CHOICES_KEYWORD: &str = "x-choices";

impl ApiSpec {
    /// Marks the top-level parameter `param` as taking one of the session's `list` (see
    /// [`CHOICES_KEYWORD`]).
    #[must_use]
    pub fn choices_from(mut self, param: &str, list: &str) -> Self {
        if let Some(property) = self.parameters.pointer_mut(&format!("/properties/{param}"))
            && let Some(property) = property.as_object_mut()
        {
            property.insert(CHOICES_KEYWORD.to_owned(), Value::String(list.to_owned()));
        }
        self
    }

    /// This API as a session declares it: each parameter marked with [`CHOICES_KEYWORD`] gets
    /// `choices(list)` as its `enum` (when that gives a list that is not empty) and loses the
    /// mark. Borrowed when nothing is marked.
    pub fn with_choices(
        &self,
        choices: impl Fn(&str) -> Option<Vec<String>>,
    ) -> std::borrow::Cow<'_, ApiSpec> {
        let marked = self
            .parameters
            .get("properties")
            .and_then(Value::as_object)
            .is_some_and(|props| props.values().any(|p| p.get(CHOICES_KEYWORD).is_some()));
        if !marked {
            return std::borrow::Cow::Borrowed(self);
        }
        let mut api = self.clone();
        if let Some(props) = api.parameters.get_mut("properties").and_then(Value::as_object_mut) {
            for property in props.values_mut() {
                let Some(property) = property.as_object_mut() else { continue };
                let Some(Value::String(list)) = property.remove(CHOICES_KEYWORD) else { continue };
                if let Some(names) = choices(&list).filter(|n| !n.is_empty()) {
                    property.insert("enum".to_owned(), Value::from(names));
                }
            }
        }
        std::borrow::Cow::Owned(api)
    }

    /// An API whose parameters are derived from `Args`.
    ///
    /// Defaults: tier `exec` (a tool that declares nothing is treated as the riskiest), parallel,
    /// collapsed, no timeout of its own, the tool's intervention policy.
    pub fn new<Args: JsonSchema>(name: impl Into<String>, description: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            description: description.into(),
            parameters: schema_for::<Args>(),
            default_timeout_ms: None,
            max_timeout_ms: None,
            intervention: None,
            tier: TierSpec::default(),
            execution: ExecutionMode::default(),
            display: DisplayControl::default(),
            path_params: Vec::new(),
            command_param: None,
            open_world: false,
            output_schema: None,
            annotations: None,
            previewable: false,
            when_previewing: false,
            asks_person: false,
        }
    }

    /// Marks the API as one whose calls may wait for a person's answer (see
    /// [`ApiSpec::asks_person`]).
    #[must_use]
    pub fn asks_person(mut self) -> Self {
        self.asks_person = true;
        self
    }

    /// Marks the API as one whose calls a session that previews writes shows first (see
    /// [`ApiSpec::previewable`]).
    #[must_use]
    pub fn previewable(mut self) -> Self {
        self.previewable = true;
        self
    }

    /// Declares the API only in sessions that preview writes.
    #[must_use]
    pub fn when_previewing(mut self) -> Self {
        self.when_previewing = true;
        self
    }

    /// Marks the API as reaching beyond this machine (the web, a remote service).
    #[must_use]
    pub fn open_world(mut self) -> Self {
        self.open_world = true;
        self
    }

    /// Sets the default timeout.
    #[must_use]
    pub fn timeout_ms(mut self, ms: u64) -> Self {
        self.default_timeout_ms = Some(ms);
        self
    }

    /// Sets the largest timeout a call may ask for.
    #[must_use]
    pub fn max_timeout_ms(mut self, ms: u64) -> Self {
        self.max_timeout_ms = Some(ms);
        self
    }

    /// Sets the API's intervention policy.
    #[must_use]
    pub fn intervention(mut self, policy: InterventionPolicy) -> Self {
        self.intervention = Some(policy);
        self
    }

    /// Sets a fixed tier.
    #[must_use]
    pub fn tier(mut self, tier: Tier) -> Self {
        self.tier = TierSpec::Fixed(tier);
        self
    }

    /// Sets the tier spec (fixed or computed).
    #[must_use]
    pub fn tier_spec(mut self, tier: TierSpec) -> Self {
        self.tier = tier;
        self
    }

    /// Sets the execution mode.
    #[must_use]
    pub fn execution(mut self, mode: ExecutionMode) -> Self {
        self.execution = mode;
        self
    }

    /// Sets the display control.
    #[must_use]
    pub fn display(mut self, display: DisplayControl) -> Self {
        self.display = display;
        self
    }

    /// Declares the parameter that holds a shell command line.
    #[must_use]
    pub fn command_param(mut self, name: impl Into<String>) -> Self {
        self.command_param = Some(name.into());
        self
    }

    /// The shell command line in `arguments`, when the API declares one.
    pub fn command_in<'a>(&self, arguments: &'a Value) -> Option<&'a str> {
        self.command_param.as_deref().and_then(|name| arguments.get(name)).and_then(Value::as_str)
    }

    /// Declares a path parameter.
    #[must_use]
    pub fn path_param(mut self, param: PathParam) -> Self {
        self.path_params.push(param);
        self
    }
}

/// The derived JSON Schema of `T` as a JSON value (draft 2020-12, `$defs` for nested types).
pub fn schema_for<T: JsonSchema>() -> Value {
    schemars::schema_for!(T).to_value()
}

/// A simple intervention decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Intervention {
    /// Run without asking.
    Never,
    /// Ask a person; auto-run mode may skip the question.
    #[default]
    Required,
    /// Ask a person; nothing skips the question.
    Always,
}

/// How to decide whether a person must approve a call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum InterventionPolicy {
    /// One fixed decision.
    Fixed(Intervention),
    /// Rules over the arguments; the first match wins, no match means `required`.
    Rules {
        /// The rules in order.
        rules: Vec<InterventionRule>,
    },
    /// A dynamic audit looked up by name.
    Audit {
        /// The audit's name in the registry's audit table.
        audit: String,
        /// The decision when the audit finds nothing to ask about.
        #[serde(default = "never")]
        default: Intervention,
        /// The decision when the audit flags the call.
        #[serde(default)]
        policy: Intervention,
    },
}

fn never() -> Intervention {
    Intervention::Never
}

impl Default for InterventionPolicy {
    fn default() -> Self {
        Self::Fixed(Intervention::Required)
    }
}

impl From<Intervention> for InterventionPolicy {
    fn from(value: Intervention) -> Self {
        Self::Fixed(value)
    }
}

impl InterventionPolicy {
    /// A dynamic audit: `default` when it passes, `policy` when it flags.
    pub fn audit(name: impl Into<String>, default: Intervention, policy: Intervention) -> Self {
        Self::Audit { audit: name.into(), default, policy }
    }
}

/// One rule of a rule-list policy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InterventionRule {
    /// Parameter name → matcher; every named parameter must be present and match. Empty matches
    /// every call.
    #[serde(default, rename = "match", skip_serializing_if = "BTreeMap::is_empty")]
    pub matchers: BTreeMap<String, Matcher>,
    /// The decision when the rule matches.
    pub policy: Intervention,
}

/// A matcher for one argument.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Matcher {
    /// An anchored wildcard where `*` is any run of characters; `prefix:*` also matches `prefix`.
    Wildcard(String),
    /// An explicit matcher.
    Typed {
        /// How `pattern` is read.
        #[serde(rename = "type")]
        kind: MatcherKind,
        /// The pattern.
        pattern: String,
    },
}

/// Kinds of explicit matcher.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MatcherKind {
    /// Equal strings.
    Exact,
    /// The argument starts with the pattern.
    Prefix,
    /// Anchored wildcard.
    Wildcard,
    /// A regular expression (anchoring is the pattern's own).
    Regex,
}

/// Risk tiers, ordered: read < write < exec.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Tier {
    /// Observes only.
    Read,
    /// Changes files or state.
    Write,
    /// Runs arbitrary code.
    Exec,
}

/// A tier that is fixed, or computed from the arguments by a named function.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TierSpec {
    /// Always this tier.
    Fixed(Tier),
    /// Computed by the function of this name in the registry's tier table.
    Computed(String),
}

impl Default for TierSpec {
    fn default() -> Self {
        Self::Fixed(Tier::Exec)
    }
}

/// Whether a call may run concurrently with others of its batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ExecutionMode {
    /// May share the batch with other parallel calls.
    #[default]
    Parallel,
    /// Runs alone.
    Sequential,
}

/// How a front end shows a call by default.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DisplayControl {
    /// A one-line card, expandable.
    #[default]
    Collapsed,
    /// Expanded once, collapsible.
    Expanded,
    /// Always expanded.
    AlwaysExpanded,
}

/// An argument that names a filesystem path.
///
/// `pointer` is a field name, or a dotted path where `[]` means every element of an array:
/// `path`, `items[].oldPath`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PathParam {
    /// Where the path is in the arguments.
    pub pointer: String,
    /// Only treat the value as a path when it is absolute (glob patterns are relative otherwise).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub absolute_only: bool,
    /// The value may also be an internal URL (`skill://…`: no path, judged by its reader) or
    /// carry a line selector (`file:10-20`: the path is what precedes it).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub addresses: bool,
}

impl PathParam {
    /// A path parameter at `pointer`.
    pub fn new(pointer: impl Into<String>) -> Self {
        Self { pointer: pointer.into(), absolute_only: false, addresses: false }
    }

    /// A parameter that is a path only when absolute.
    pub fn absolute_only(pointer: impl Into<String>) -> Self {
        Self { pointer: pointer.into(), absolute_only: true, addresses: false }
    }

    /// The same parameter, taking internal URLs and line selectors too.
    #[must_use]
    pub fn with_addresses(mut self) -> Self {
        self.addresses = true;
        self
    }

    /// The paths this parameter names in `arguments` (without selectors; internal URLs are not
    /// paths).
    pub fn select<'a>(&self, arguments: &'a Value) -> Vec<&'a str> {
        let mut found = Vec::new();
        select_into(arguments, &self.pointer, &mut found);
        if self.absolute_only {
            found.retain(|path| path.starts_with('/') || path.starts_with('~'));
        }
        if self.addresses {
            found.retain(|path| crate::urls::scheme_of(path).is_none());
            for path in &mut found {
                *path = crate::urls::select(path).target;
            }
        }
        found
    }
}

fn select_into<'a>(value: &'a Value, pointer: &str, out: &mut Vec<&'a str>) {
    let (head, rest) = match pointer.split_once('.') {
        Some((head, rest)) => (head, Some(rest)),
        None => (pointer, None),
    };
    let (field, each) = match head.strip_suffix("[]") {
        Some(field) => (field, true),
        None => (head, false),
    };
    let Some(child) = value.get(field) else { return };
    let children: Vec<&Value> = match (each, child) {
        (true, Value::Array(items)) => items.iter().collect(),
        (true, _) => return,
        (false, other) => vec![other],
    };
    for child in children {
        match rest {
            Some(rest) => select_into(child, rest, out),
            None => {
                if let Some(text) = child.as_str() {
                    out.push(text);
                }
            }
        }
    }
}

/// Replaces `{{key}}` in `template` with the value of `key`; unknown placeholders stay as they are,
/// so a missing value is visible rather than silently blank.
pub fn render_template(template: &str, values: &BTreeMap<&str, String>) -> String {
    let mut out = String::with_capacity(template.len());
    let mut rest = template;
    while let Some(start) = rest.find("{{") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        match after.find("}}") {
            Some(end) => {
                let key = after[..end].trim();
                match values.get(key) {
                    Some(value) => out.push_str(value),
                    None => out.push_str(&rest[start..start + 2 + end + 2]),
                }
                rest = &after[end + 2..];
            }
            None => {
                out.push_str(&rest[start..]);
                rest = "";
            }
        }
    }
    out.push_str(rest);
    out
}

/// Today's date in UTC as `YYYY-MM-DD`, the `{{date}}` of system roles.
pub fn today() -> String {
    let days = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() / 86_400);
    civil_date(days as i64)
}

/// The civil date of a day counted from 1970-01-01 (Howard Hinnant's algorithm).
pub fn civil_date(days: i64) -> String {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn policies_serialise_in_their_short_forms() {
        let cases = [
            (InterventionPolicy::Fixed(Intervention::Never), json!("never")),
            (
                InterventionPolicy::audit("pathScope", Intervention::Never, Intervention::Required),
                json!({"audit": "pathScope", "default": "never", "policy": "required"}),
            ),
            (
                InterventionPolicy::Rules {
                    rules: vec![InterventionRule {
                        matchers: [("command".to_owned(), Matcher::Wildcard("git status*".into()))].into(),
                        policy: Intervention::Never,
                    }],
                },
                json!({"rules": [{"match": {"command": "git status*"}, "policy": "never"}]}),
            ),
        ];
        for (policy, expected) in cases {
            assert_eq!(serde_json::to_value(&policy).unwrap(), expected);
            let back: InterventionPolicy = serde_json::from_value(expected).unwrap();
            assert_eq!(back, policy);
        }
        let typed: Matcher = serde_json::from_value(json!({"type": "regex", "pattern": "^rm"})).unwrap();
        assert_eq!(typed, Matcher::Typed { kind: MatcherKind::Regex, pattern: "^rm".into() });
    }

    #[test]
    fn tiers_order_and_serialise() {
        assert!(Tier::Read < Tier::Write && Tier::Write < Tier::Exec);
        assert_eq!(serde_json::to_value(TierSpec::Fixed(Tier::Read)).unwrap(), json!({"fixed": "read"}));
        assert_eq!(
            serde_json::to_value(TierSpec::Computed("shell".into())).unwrap(),
            json!({"computed": "shell"})
        );
    }

    #[test]
    fn path_params_select_nested_values() {
        let args = json!({
            "path": "/a",
            "items": [{"oldPath": "b", "newPath": "c"}, {"oldPath": "d"}],
            "pattern": "src/**/*.rs",
        });
        let cases: [(PathParam, &[&str]); 5] = [
            (PathParam::new("path"), &["/a"]),
            (PathParam::new("items[].oldPath"), &["b", "d"]),
            (PathParam::new("items[].newPath"), &["c"]),
            (PathParam::absolute_only("pattern"), &[]),
            (PathParam::new("missing"), &[]),
        ];
        for (param, expected) in cases {
            assert_eq!(param.select(&args), expected, "{param:?}");
        }
        let absolute = json!({"pattern": "/etc/*.conf"});
        assert_eq!(PathParam::absolute_only("pattern").select(&absolute), ["/etc/*.conf"]);
    }

    #[test]
    fn civil_dates() {
        assert_eq!(civil_date(0), "1970-01-01");
        assert_eq!(civil_date(11_016), "2000-02-29");
        assert_eq!(civil_date(20_787), "2026-11-30");
        assert_eq!(civil_date(-1), "1969-12-31");
    }

    #[test]
    fn system_role_placeholders() {
        let manifest = ToolManifest::new("t", ToolMeta::new("T", "d"))
            .system_role("Today is {{date}}. Dir: {{ cwd }}. Keep {{unknown}} and {{open");
        let values = [("date", "2026-11-29".to_owned()), ("cwd", "/w".to_owned())].into();
        assert_eq!(
            manifest.render_system_role(&values),
            "Today is 2026-11-29. Dir: /w. Keep {{unknown}} and {{open"
        );
    }
}
