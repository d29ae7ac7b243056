//! Settings that parse and are still wrong: what the start, a reload and `check-config` refuse.
//!
//! Each check returns sentences that name the setting as the configuration file spells it
//! (`workspace-root`), so that the operator finds it whether it came from a flag, a variable or
//! the file (`check-config` adds where each came from: [`crate::settings::Origins`]).

use std::path::{Path, PathBuf};

use crate::auth::Keys;
use crate::config::{RootOwner, ServeArgs};

/// What is wrong with how tenants are set up: a plain workspace root while the keys name several
/// tenants; two tenants given the same folder, or one inside the other's (one tenant's sessions
/// would reach the other's files); a tenant named in `workspace-root`, `tenant-path` or
/// `skills-dir` that no key has (a typo, whose folder no one can use).
pub fn tenancy(args: &ServeArgs, keys: &Keys) -> Vec<String> {
    let mut problems = Vec::new();
    let tenants = keys.tenants();
    if tenants.len() > 1
        && let Some(plain) = args.workspace_roots.iter().find(|root| root.owner == RootOwner::Unnamed)
    {
        problems.push(format!(
            "workspace-root: {} names no tenant, and the keys belong to {} tenants ({}): give it its tenant \
             (TENANT=PATH), or share it on purpose (*=PATH)",
            plain.path.display(),
            tenants.len(),
            tenants.join(", ")
        ));
    }
    let owned: Vec<(&str, PathBuf)> = args
        .workspace_roots
        .iter()
        .filter_map(|root| match &root.owner {
            RootOwner::Tenant(tenant) => Some((tenant.as_str(), resolved(&root.path))),
            _ => None,
        })
        .collect();
    for (i, (a, path_a)) in owned.iter().enumerate() {
        for (b, path_b) in &owned[i + 1..] {
            if a == b {
                continue;
            }
            let relation = if path_a == path_b {
                "the same folder"
            } else if path_b.starts_with(path_a) || path_a.starts_with(path_b) {
                "one folder inside the other"
            } else {
                continue;
            };
            problems.push(format!(
                "workspace-root: tenants `{a}` ({}) and `{b}` ({}) are given {relation}: each would reach the \
                 other's files. Give each its own folder, or share one on purpose with *=PATH",
                path_a.display(),
                path_b.display()
            ));
        }
    }
    if !keys.is_open() {
        let named = args
            .workspace_roots
            .iter()
            .map(|root| ("workspace-root", &root.owner))
            .chain(args.tenant_paths.iter().map(|path| ("tenant-path", &path.owner)))
            .chain(args.skills_dirs.iter().map(|dir| ("skills-dir", &dir.owner)));
        for (setting, owner) in named {
            if let RootOwner::Tenant(tenant) = owner
                && !tenants.contains(tenant)
            {
                let closest = closest(tenant, tenants.iter().map(String::as_str));
                problems.push(format!(
                    "{setting}: no key belongs to the tenant `{tenant}`{}",
                    closest.map(|c| format!(" (did you mean `{c}`?)")).unwrap_or_default()
                ));
            }
        }
    }
    problems
}

/// What is wrong with `[notify]` and `console-url`: a channel that cannot be made (an invalid URL
/// or address, clear SMTP beyond this machine), a tenant no key has, and links no one could open
/// (notifications without a `console-url` while the server listens on every interface).
pub fn notify(args: &ServeArgs, keys: &Keys) -> Vec<String> {
    let mut problems = Vec::new();
    if let Some(url) = &args.console_url
        && !(url.starts_with("http://") || url.starts_with("https://"))
    {
        problems.push(format!("console-url: `{url}` is not an http:// or https:// address"));
    }
    let channels = args.notify.channels();
    let tenants = keys.tenants();
    for (tenant, config) in &channels {
        let kind = match config {
            notify::ChannelConfig::Webhook { .. } => "notify.webhook",
            notify::ChannelConfig::Email { .. } => "notify.email",
        };
        if let Err(error) = notify::Channel::new(config) {
            problems.push(format!("{kind}: {error}"));
        }
        if tenant != "*" && !keys.is_open() && !tenants.contains(tenant) {
            let closest = closest(tenant, tenants.iter().map(String::as_str));
            problems.push(format!(
                "{kind}: no key belongs to the tenant `{tenant}`{}",
                closest.map(|c| format!(" (did you mean `{c}`?)")).unwrap_or_default()
            ));
        }
    }
    if !channels.is_empty() && args.console_url.is_none() && args.listen.ip().is_unspecified() {
        problems.push(format!(
            "console-url: notifications link into the console, and http://{} is no address a person can open; \
             set console-url to the address people use (https://toolhost.example.com)",
            args.listen
        ));
    }
    problems
}

/// The folder a path names, links resolved where it exists (else as written).
fn resolved(path: &Path) -> PathBuf {
    path.canonicalize().unwrap_or_else(|_| path.to_path_buf())
}

/// The tools and APIs a deny rule may name.
pub trait KnownTools {
    /// The API names of `tool`; `None` when there is no such tool; `Some(None)` when its APIs are
    /// not known here (a mounted server, before it starts).
    fn apis_of(&self, tool: &str) -> Option<Option<Vec<String>>>;
    /// Every tool's name.
    fn tool_names(&self) -> Vec<String>;
}

impl KnownTools for tool_executor::Toolbox {
    fn apis_of(&self, tool: &str) -> Option<Option<Vec<String>>> {
        self.tool(tool).map(|entry| Some(entry.manifest.apis.iter().map(|api| api.name.clone()).collect()))
    }

    fn tool_names(&self) -> Vec<String> {
        self.tools().iter().map(|entry| entry.manifest.identifier.clone()).collect()
    }
}

/// The builtin tools and the MCP servers a mount file names (whose APIs are known only once they
/// start): what `check-config` knows without starting anything.
#[derive(Debug, Default)]
pub struct Catalogue {
    builtin: Vec<(String, Vec<String>)>,
    mounted: Vec<String>,
}

impl Catalogue {
    /// The builtin registry and the servers and APIs of `mcp_config` (if it reads).
    pub fn of(mcp_config: Option<&Path>) -> Self {
        let builtin = builtin_tools::Registry::builtin()
            .entries()
            .iter()
            .map(|e| {
                (e.manifest.identifier.clone(), e.manifest.apis.iter().map(|api| api.name.clone()).collect())
            })
            .collect();
        let mounted = mcp_config
            .and_then(|path| std::fs::read_to_string(path).ok())
            .map(|text| {
                let mut names: Vec<String> = mcp::client::McpConfig::parse(&text)
                    .map(|config| config.servers.into_keys().map(|name| format!("mcp-{name}")).collect())
                    .unwrap_or_default();
                if let Ok(table) = toml::from_str::<toml::Table>(&text)
                    && let Some(toml::Value::Table(apis)) = table.get("apis")
                {
                    names.extend(apis.keys().map(|name| format!("api-{name}")));
                }
                names
            })
            .unwrap_or_default();
        Self { builtin, mounted }
    }
}

impl KnownTools for Catalogue {
    fn apis_of(&self, tool: &str) -> Option<Option<Vec<String>>> {
        if let Some((_, apis)) = self.builtin.iter().find(|(name, _)| name == tool) {
            return Some(Some(apis.clone()));
        }
        self.mounted.iter().any(|name| name == tool).then_some(None)
    }

    fn tool_names(&self) -> Vec<String> {
        self.builtin.iter().map(|(name, _)| name.clone()).chain(self.mounted.iter().cloned()).collect()
    }
}

/// What a running server knows: its toolbox, then what its mount file names (a server that did
/// not start is still named there).
impl KnownTools for (&tool_executor::Toolbox, &Catalogue) {
    fn apis_of(&self, tool: &str) -> Option<Option<Vec<String>>> {
        self.0.apis_of(tool).or_else(|| self.1.apis_of(tool))
    }

    fn tool_names(&self) -> Vec<String> {
        let mut names = self.0.tool_names();
        names.extend(self.1.tool_names());
        names.sort();
        names.dedup();
        names
    }
}

/// Refuses a deny rule naming a tool or an API that does not exist (it would never match, and the
/// call it was meant to stop would run), with the closest name.
///
/// # Errors
///
/// The first such rule, said.
pub fn deny_rules(deny: &tool_executor::deny::DenyList, known: &dyn KnownTools) -> Result<(), String> {
    for (n, rule) in deny.rules().enumerate() {
        if rule.tool == "*" {
            continue;
        }
        let Some(apis) = known.apis_of(&rule.tool) else {
            let names = known.tool_names();
            let closest = closest(&rule.tool, names.iter().map(String::as_str));
            return Err(format!(
                "deny-rules-file: rule {} names the tool `{}`, which this server does not have{}; it would never match",
                n + 1,
                rule.tool,
                closest.map(|c| format!(" (did you mean `{c}`?)")).unwrap_or_default()
            ));
        };
        if rule.api != "*"
            && let Some(apis) = apis
            && !apis.contains(&rule.api)
        {
            let closest = closest(&rule.api, apis.iter().map(String::as_str));
            return Err(format!(
                "deny-rules-file: rule {} names the API `{}/{}`, which does not exist{}; it would never match",
                n + 1,
                rule.tool,
                rule.api,
                closest.map(|c| format!(" (did you mean `{}/{c}`?)", rule.tool)).unwrap_or_default()
            ));
        }
    }
    Ok(())
}

/// The operator's hooks file, as the start reads it: a file named but missing, unreadable or not
/// hooks is an error (the hooks would silently be off); what it holds that Toolhost does not run
/// is returned as warnings.
///
/// # Errors
///
/// Why the file is no hooks file.
pub fn hooks_file(path: &Path) -> Result<Vec<String>, String> {
    if !path.is_file() {
        return Err(format!(
            "hooks: {} does not exist (or is not a file): no hook would run",
            path.display()
        ));
    }
    let mut set = hooks::HookSet::default();
    set.read_file(path, hooks::Origin::Operator).map_err(|e| format!("hooks: {e}"))?;
    if set.hooks.is_empty() {
        return Err(format!(
            "hooks: {} holds no hook Toolhost runs ({}): no hook would run",
            path.display(),
            if set.warnings.is_empty() {
                "no `hooks` object of events".to_owned()
            } else {
                set.warnings.join("; ")
            }
        ));
    }
    Ok(set.warnings)
}

/// The name among `names` nearest to `name`, if one is near enough to be a typo.
fn closest<'a>(name: &str, names: impl Iterator<Item = &'a str>) -> Option<&'a str> {
    names
        .map(|candidate| (crate::settings::distance(name, candidate), candidate))
        .filter(|(distance, candidate)| *distance <= (candidate.len() / 3).max(2))
        .min_by_key(|(distance, _)| *distance)
        .map(|(_, candidate)| candidate)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(roots: &[&str]) -> ServeArgs {
        ServeArgs {
            workspace_roots: roots.iter().map(|r| r.parse().unwrap()).collect(),
            ..ServeArgs::default()
        }
    }

    fn keys(tenants: &[&str]) -> Keys {
        let stored: Vec<String> =
            tenants.iter().map(|t| crate::auth::stored_form(t, &format!("key-{t}"))).collect();
        Keys::parse(stored.iter().map(String::as_str)).unwrap()
    }

    #[test]
    fn tenants_sharing_or_nesting_folders_or_named_without_a_key_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().display().to_string();
        std::fs::create_dir_all(dir.path().join("acme/inner")).unwrap();
        let two = keys(&["acme", "globex"]);
        assert!(
            tenancy(&args(&[&format!("acme={base}/acme"), &format!("globex={base}/globex")]), &two)
                .is_empty()
        );
        let same = tenancy(&args(&[&format!("acme={base}/acme"), &format!("globex={base}/acme")]), &two);
        assert!(same[0].contains("the same folder"), "{same:?}");
        let nested =
            tenancy(&args(&[&format!("acme={base}/acme"), &format!("globex={base}/acme/inner")]), &two);
        assert!(nested[0].contains("one folder inside the other"), "{nested:?}");
        // Shared on purpose is not a mistake.
        assert!(tenancy(&args(&[&format!("*={base}/acme"), &format!("acme={base}/acme")]), &two).is_empty());
        let typo = tenancy(&args(&[&format!("acne={base}/acme")]), &two);
        assert_eq!(typo, ["workspace-root: no key belongs to the tenant `acne` (did you mean `acme`?)"]);
        // An open server has no tenants but its own.
        assert!(tenancy(&args(&[&format!("acne={base}/acme")]), &Keys::default()).is_empty());
    }

    #[test]
    fn deny_rules_naming_nothing_are_refused_with_the_closest_name() {
        let catalogue = Catalogue::of(None);
        let rules =
            |json: &str| tool_executor::deny::DenyList::compile(serde_json::from_str(json).unwrap()).unwrap();
        assert!(deny_rules(&rules(r#"[{"tool": "local-system", "api": "runCommand"}]"#), &catalogue).is_ok());
        assert!(deny_rules(&rules(r#"[{"tool": "*", "api": "whatever"}]"#), &catalogue).is_ok());
        let tool =
            deny_rules(&rules(r#"[{"tool": "local-sytem", "api": "runCommand"}]"#), &catalogue).unwrap_err();
        assert!(tool.contains("`local-sytem`") && tool.contains("did you mean `local-system`"), "{tool}");
        let api =
            deny_rules(&rules(r#"[{"tool": "local-system", "api": "runComand"}]"#), &catalogue).unwrap_err();
        assert!(api.contains("did you mean `local-system/runCommand`"), "{api}");
    }

    #[test]
    fn a_hooks_file_that_is_missing_or_holds_no_hooks_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("hooks.json");
        assert!(hooks_file(&path).unwrap_err().contains("does not exist"));
        std::fs::write(&path, "{not json").unwrap();
        assert!(hooks_file(&path).is_err());
        std::fs::write(&path, r#"{"hoks": {}}"#).unwrap();
        assert!(hooks_file(&path).unwrap_err().contains("holds no hook"));
        std::fs::write(&path, r#"{"hooks": {"PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "command", "command": "true"}]}]}}"#).unwrap();
        assert!(hooks_file(&path).unwrap().is_empty());
    }
}
